;; Opens the file named by its request, in the first folder it was given (fd 3), 5,000 times
;; without closing it; exits with the WASI errno of the first open refused, 0 if none was.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (local $len i32) (local $i i32) (local $err i32)
    (i32.store (i32.const 0) (i32.const 2048))
    (i32.store (i32.const 4) (i32.const 1024))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16)))
    (local.set $len (i32.load (i32.const 16)))
    (loop $more
      (local.set $err (call $path_open (i32.const 3) (i32.const 0) (i32.const 2048) (local.get $len)
        (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 20)))
      (if (local.get $err) (then (call $proc_exit (local.get $err))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 5000))))))
