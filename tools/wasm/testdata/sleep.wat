;; Asks WASI to sleep for an hour (one relative clock subscription), then answers {}.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 200) "{}")
  (func (export "_start")
    ;; subscription at 0: userdata 7, tag 0 (clock), clock 1 (monotonic), timeout 3600 s, flags 0
    (i64.store (i32.const 0) (i64.const 7))
    (i32.store8 (i32.const 8) (i32.const 0))
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (i64.const 3600000000000))
    (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))
    (i32.store (i32.const 300) (i32.const 200))
    (i32.store (i32.const 304) (i32.const 2))
    (drop (call $fd_write (i32.const 1) (i32.const 300) (i32.const 1) (i32.const 308)))))
