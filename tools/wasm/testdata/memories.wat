;; Two memories of 16 pages (1 MiB) each: 2 MiB together.
(module
  (memory (export "memory") 16)
  (memory $second 16)
  (func (export "_start")))
