;; A TCP client, as a component (with connect.wit): connects to 127.0.0.1:PORT (the test puts
;; the port in), writes "GET /from-tool HTTP/1.0" there, and answers {"connected":true}, or
;; {"connected":false,"code":"NN"} with the WASI sockets error code of the step that failed.
(module
  (import "wasi:sockets/instance-network@0.2.0" "instance-network" (func $network (result i32)))
  (import "wasi:sockets/tcp-create-socket@0.2.0" "create-tcp-socket"
    (func $create (param i32 i32)))
  (import "wasi:sockets/tcp@0.2.0" "[method]tcp-socket.start-connect"
    (func $start (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)))
  (import "wasi:sockets/tcp@0.2.0" "[method]tcp-socket.finish-connect"
    (func $finish (param i32 i32)))
  (import "wasi:sockets/tcp@0.2.0" "[method]tcp-socket.subscribe" (func $subscribe (param i32) (result i32)))
  (import "wasi:io/poll@0.2.0" "[method]pollable.block" (func $block (param i32)))
  (import "wasi:io/streams@0.2.0" "[method]output-stream.blocking-write-and-flush"
    (func $write (param i32 i32 i32 i32)))
  (import "wasi:cli/stdout@0.2.0" "get-stdout" (func $stdout (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 1024) "GET /from-tool HTTP/1.0\0d\0a\0d\0a")
  (data (i32.const 1100) "{\"connected\":true}")
  (data (i32.const 1200) "{\"connected\":false,\"code\":\"00\"}")
  ;; Answers {"connected":false,"code":"NN"} for error code `code`.
  (func $failed (param $code i32) (result i32)
    (i32.store8 (i32.const 1227) (i32.add (i32.const 48) (i32.div_u (local.get $code) (i32.const 10))))
    (i32.store8 (i32.const 1228) (i32.add (i32.const 48) (i32.rem_u (local.get $code) (i32.const 10))))
    (call $write (call $stdout) (i32.const 1200) (i32.const 31) (i32.const 0))
    (i32.const 0))
  (func (export "wasi:cli/run@0.2.0#run") (result i32)
    (local $sock i32) (local $pollable i32)
    ;; create-tcp-socket(ipv4): result at 16 (tag; handle or error code at 20)
    (call $create (i32.const 0) (i32.const 16))
    (if (i32.load8_u (i32.const 16)) (then (return (call $failed (i32.load8_u (i32.const 20))))))
    (local.set $sock (i32.load (i32.const 20)))
    ;; start-connect(sock, network, ipv4 { port, 127.0.0.1 }): result at 32 (tag; code at 33)
    (call $start (local.get $sock) (call $network)
      (i32.const 0) (i32.const PORT) (i32.const 127) (i32.const 0) (i32.const 0) (i32.const 1)
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
      (i32.const 32))
    (if (i32.load8_u (i32.const 32)) (then (return (call $failed (i32.load8_u (i32.const 33))))))
    (local.set $pollable (call $subscribe (local.get $sock)))
    ;; finish-connect until it stops saying would-block (8): result at 48 (tag; in, out at 52, 56)
    (loop $wait
      (call $block (local.get $pollable))
      (call $finish (local.get $sock) (i32.const 48))
      (if (i32.load8_u (i32.const 48))
        (then
          (if (i32.eq (i32.load8_u (i32.const 52)) (i32.const 8)) (then (br $wait)))
          (return (call $failed (i32.load8_u (i32.const 52)))))))
    (call $write (i32.load (i32.const 56)) (i32.const 1024) (i32.const 27) (i32.const 64))
    (call $write (call $stdout) (i32.const 1100) (i32.const 18) (i32.const 64))
    (i32.const 0)))
