;; Creates (or replaces) the file whose path is its whole request, in the first folder it was
;; given (fd 3), and writes "written" in it. Exits with the WASI errno when the open fails.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "written")
  (func (export "_start")
    (local $len i32) (local $err i32)
    (i32.store (i32.const 0) (i32.const 2048))
    (i32.store (i32.const 4) (i32.const 4096))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16)))
    (local.set $len (i32.load (i32.const 16)))
    ;; oflags creat|trunc (1|8), rights fd_write (64)
    (local.set $err (call $path_open (i32.const 3) (i32.const 0) (i32.const 2048) (local.get $len)
      (i32.const 9) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 20)))
    (if (local.get $err) (then (call $proc_exit (local.get $err))))
    (i32.store (i32.const 0) (i32.const 100))
    (i32.store (i32.const 4) (i32.const 7))
    (drop (call $fd_write (i32.load (i32.const 20)) (i32.const 0) (i32.const 1) (i32.const 16)))))
