;; Two tables of 100,000 function references each (800 KB apiece as the limit counts them).
(module
  (memory (export "memory") 1)
  (table $a 100000 funcref)
  (table $b 100000 funcref)
  (func (export "_start")))
