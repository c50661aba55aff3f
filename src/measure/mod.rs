//! Measuring kernels on a GPU: the device and its launches (`gpu`), problems laid out
//! as engines pass them (`problems`), the reference kernels that fill and check them (`support`), the checks against an f32 reference (`verify`)
//! and the timing loops (`bench`). The tuner measures through these too.

pub mod bench;
pub mod gpu;
pub mod kernels;
pub mod problems;
pub mod support;
pub mod verify;
