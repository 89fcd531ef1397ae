;; Asks for memory until it is refused.
(module
  (memory 1)
  (func (export "_start")
    (loop $more (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))))
