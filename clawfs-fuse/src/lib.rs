//! The thin FUSE adapter over `clawfs-core`: [`adapter::Adapter`] implements fuser's
//! `Filesystem`, and [`errno`] turns the core's errors into the errno the caller gets.

pub mod adapter;
pub mod errno;
