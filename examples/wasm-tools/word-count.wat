;; word-count: a published ClawFS tool. It reads the file whose path is given in its request
;; (JSON: {"path": "notes.md"}) from the first folder its capabilities give it, and answers
;; {"bytes": B, "lines": L, "words": W}. Build: `wat2wasm word-count.wat -o word-count-v1.0.0.wasm`
;; (WABT), or any language that targets WASI (wasm32-wasip1 or wasm32-wasip2 with a main that
;; reads stdin and writes stdout).
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 2)
  ;; 0..16: an iovec and a count; 32..65: the answer's words; 128: the answer; 1024: the request; 8192: file data.
  (data (i32.const 32) "{\"bytes\":")
  (data (i32.const 44) ",\"lines\":")
  (data (i32.const 56) ",\"words\":")

  ;; Reads fd into 8192.. until end; returns nothing, counts as it goes.
  (global $bytes (mut i32) (i32.const 0))
  (global $lines (mut i32) (i32.const 0))
  (global $words (mut i32) (i32.const 0))
  (global $in_word (mut i32) (i32.const 0))
  (global $out (mut i32) (i32.const 128))

  (func $count (param $n i32)
    (local $i i32) (local $c i32) (local $space i32)
    (global.set $bytes (i32.add (global.get $bytes) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $c (i32.load8_u (i32.add (i32.const 8192) (local.get $i))))
        (if (i32.eq (local.get $c) (i32.const 10))
          (then (global.set $lines (i32.add (global.get $lines) (i32.const 1)))))
        (local.set $space (i32.or (i32.eq (local.get $c) (i32.const 32))
          (i32.and (i32.ge_u (local.get $c) (i32.const 9)) (i32.le_u (local.get $c) (i32.const 13)))))
        (if (local.get $space)
          (then (global.set $in_word (i32.const 0)))
          (else
            (if (i32.eqz (global.get $in_word))
              (then (global.set $words (i32.add (global.get $words) (i32.const 1)))))
            (global.set $in_word (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))

  ;; Appends `len` bytes at `from` to the answer.
  (func $put (param $from i32) (param $len i32)
    (memory.copy (global.get $out) (local.get $from) (local.get $len))
    (global.set $out (i32.add (global.get $out) (local.get $len))))

  ;; Appends `v` in decimal.
  (func $num (param $v i32)
    (local $start i32) (local $end i32) (local $t i32)
    (local.set $start (global.get $out))
    (loop $digit
      (i32.store8 (global.get $out) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (global.set $out (i32.add (global.get $out) (i32.const 1)))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $digit (local.get $v)))
    ;; reverse the digits in place
    (local.set $end (i32.sub (global.get $out) (i32.const 1)))
    (block $done
      (loop $swap
        (br_if $done (i32.ge_u (local.get $start) (local.get $end)))
        (local.set $t (i32.load8_u (local.get $start)))
        (i32.store8 (local.get $start) (i32.load8_u (local.get $end)))
        (i32.store8 (local.get $end) (local.get $t))
        (local.set $start (i32.add (local.get $start) (i32.const 1)))
        (local.set $end (i32.sub (local.get $end) (i32.const 1)))
        (br $swap))))

  (func (export "_start")
    (local $len i32) (local $i i32) (local $path i32) (local $plen i32) (local $fd i32)
    (local $err i32) (local $n i32)
    ;; The request.
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.const 4096))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (local.set $len (i32.load (i32.const 8)))
    ;; The value of "path": the string after `"path"`, its colon and opening quote.
    (block $found
      (loop $scan
        (if (i32.ge_u (i32.add (local.get $i) (i32.const 6)) (local.get $len))
          (then (call $proc_exit (i32.const 22))))
        (br_if $found (i32.and
          (i32.eq (i32.load (i32.add (i32.const 1024) (local.get $i))) (i32.const 0x7461_7022)) ;; "pat
          (i32.eq (i32.load16_u (i32.add (i32.const 1028) (local.get $i))) (i32.const 0x2268))))  ;; h"
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (local.set $i (i32.add (local.get $i) (i32.const 6)))
    (block $quote
      (loop $skip
        (br_if $quote (i32.eq (i32.load8_u (i32.add (i32.const 1024) (local.get $i))) (i32.const 34)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (if (i32.ge_u (local.get $i) (local.get $len)) (then (call $proc_exit (i32.const 22))))
        (br $skip)))
    (local.set $path (i32.add (i32.const 1025) (local.get $i)))
    (block $end
      (loop $chars
        (br_if $end (i32.eq (i32.load8_u (i32.add (local.get $path) (local.get $plen))) (i32.const 34)))
        (local.set $plen (i32.add (local.get $plen) (i32.const 1)))
        (if (i32.ge_u (i32.add (local.get $i) (local.get $plen)) (local.get $len))
          (then (call $proc_exit (i32.const 22))))
        (br $chars)))
    ;; Open it read-only in the first folder given (fd 3).
    (local.set $err (call $path_open (i32.const 3) (i32.const 0) (local.get $path) (local.get $plen)
      (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 12)))
    (if (local.get $err) (then (call $proc_exit (local.get $err))))
    (local.set $fd (i32.load (i32.const 12)))
    (loop $more
      (i32.store (i32.const 0) (i32.const 8192))
      (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $fd_read (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (local.get $n) (then (call $count (local.get $n)) (br $more))))
    ;; The answer.
    (call $put (i32.const 32) (i32.const 9))
    (call $num (global.get $bytes))
    (call $put (i32.const 44) (i32.const 9))
    (call $num (global.get $lines))
    (call $put (i32.const 56) (i32.const 9))
    (call $num (global.get $words))
    (i32.store8 (global.get $out) (i32.const 125))
    (global.set $out (i32.add (global.get $out) (i32.const 1)))
    (i32.store (i32.const 0) (i32.const 128))
    (i32.store (i32.const 4) (i32.sub (global.get $out) (i32.const 128)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
