//! The routes: reading runs, acting on them, and the console.

pub(crate) mod actions;
pub(crate) mod console;
pub(crate) mod runs;
