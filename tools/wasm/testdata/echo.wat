;; Writes its request (stdin) back on stdout.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "_start")
    (local $n i32)
    (loop $more
      ;; iovec at 0: buffer 1024, length 60000; bytes read at 16
      (i32.store (i32.const 0) (i32.const 1024))
      (i32.store (i32.const 4) (i32.const 60000))
      (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16)))
      (local.set $n (i32.load (i32.const 16)))
      (if (i32.gt_u (local.get $n) (i32.const 0))
        (then
          (i32.store (i32.const 4) (local.get $n))
          (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 16)))
          (br $more))))))
