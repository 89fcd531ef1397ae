;; Waits half a second, then does what read_file.wat does: reads the file whose path is its
;; whole request, in the first folder it was given (fd 3), and writes it on stdout.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "_start")
    (local $len i32) (local $fd i32) (local $err i32) (local $n i32)
    (i64.store (i32.const 32768) (i64.const 1))
    (i32.store8 (i32.const 32776) (i32.const 0))
    (i32.store (i32.const 32784) (i32.const 1))
    (i64.store (i32.const 32792) (i64.const 500000000))
    (drop (call $poll (i32.const 32768) (i32.const 32832) (i32.const 1) (i32.const 32896)))
    ;; the path: stdin into 2048
    (i32.store (i32.const 0) (i32.const 2048))
    (i32.store (i32.const 4) (i32.const 4096))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16)))
    (local.set $len (i32.load (i32.const 16)))
    ;; path_open(dirfd 3, lookupflags 0, path, len, oflags 0, rights fd_read|fd_seek, 0, fdflags 0, &fd at 20)
    (local.set $err (call $path_open (i32.const 3) (i32.const 0) (i32.const 2048) (local.get $len)
      (i32.const 0) (i64.const 6) (i64.const 0) (i32.const 0) (i32.const 20)))
    (if (local.get $err) (then (call $proc_exit (local.get $err))))
    (local.set $fd (i32.load (i32.const 20)))
    (loop $more
      (i32.store (i32.const 0) (i32.const 8192))
      (i32.store (i32.const 4) (i32.const 50000))
      (drop (call $fd_read (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 16)))
      (local.set $n (i32.load (i32.const 16)))
      (if (i32.gt_u (local.get $n) (i32.const 0))
        (then
          (i32.store (i32.const 4) (local.get $n))
          (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 16)))
          (br $more))))))
