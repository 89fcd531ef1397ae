;; Never ends.
(module (func (export "_start") (loop $forever (br $forever))))
