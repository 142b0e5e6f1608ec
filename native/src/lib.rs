//! `otel_agent_eval.otlp._native`: the OTLP readers' hot loops in Rust, each with the Python reader as its fallback.
//!
//! A function here either returns exactly what its Python twin returns or `None`, when the input is outside what it
//! models (then the Python reader reads it, with its own words for any problem). Property tests hold the two equal.
use pyo3::prelude::*;

mod proto;
mod spans;
mod split;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    proto::register(m)?;
    split::register(m)
}
