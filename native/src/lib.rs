//! `otel_agent_eval.otlp._native`: the OTLP readers' hot loops in Rust, and the writer of the requests `serve`
//! forwards, each with its Python twin as its fallback.
//!
//! A function here either returns exactly what its Python twin returns or `None`, when the input is outside what it
//! models (then the Python twin does the work, with its own words for any problem). Property tests hold the two equal.
use pyo3::prelude::*;

mod check;
mod proto;
mod spans;
mod split;
mod write;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    check::register(m)?;
    proto::register(m)?;
    split::register(m)?;
    write::register(m)
}
