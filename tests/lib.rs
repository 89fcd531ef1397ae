//! End-to-end and adversarial tests of ClawFS; see `adversarial/`. The library is empty.
