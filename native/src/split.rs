//! One OTLP protobuf `ExportTraceServiceRequest` into one request per worker by trace id, as the Python
//! `split_protobuf` builds them with upb (`serve --workers`): a span goes to worker `trace_id % workers` (0 when its id is not 16
//! bytes), each worker's request keeps the resource and scope of its spans and their schema URLs, and nothing else.
//!
//! Called only on bytes upb accepts (checked as upb checks them by `check.rs`, or parsed by upb). The parts are
//! spans' bytes as they came, framed anew: they parse to the requests upb would write (byte-equal for the canonical
//! encoding SDKs write). A resource or scope written twice (protobuf merges them) or anything the wire reader refuses
//! is handed back (`None`).
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::proto::{field, head, repeated, Rd};
use crate::spans::R;

/// The spans of one `ScopeSpans`, and each one's worker.
struct Scope<'a> {
    head: (Option<&'a [u8]>, &'a [u8]),
    spans: Vec<(&'a [u8], usize)>,
}

/// Per resource entry: its head and its scopes.
type Entry<'a> = ((Option<&'a [u8]>, &'a [u8]), Vec<Scope<'a>>);

fn worker_of(span: &[u8], workers: usize) -> R<usize> {
    let mut trace_id: &[u8] = b"";
    let mut r = Rd::new(span);
    while r.more() {
        match r.tag()? {
            (1, 2) => trace_id = r.ld()?, // the last one wins, as upb reads it
            (_, wt) => r.skip(wt)?,
        }
    }
    Ok(match <[u8; 16]>::try_from(trace_id) {
        Ok(id) => (u128::from_be_bytes(id) % workers as u128) as usize,
        Err(_) => 0,
    })
}

fn routed(data: &[u8], workers: usize) -> R<Vec<Entry<'_>>> {
    let mut out = Vec::new();
    for entry in repeated(data, 1)? {
        let mut scopes = Vec::new();
        for scope in repeated(entry, 2)? {
            let spans = repeated(scope, 2)?.into_iter().map(|s| Ok((s, worker_of(s, workers)?))).collect::<R<_>>()?;
            scopes.push(Scope { head: head(scope)?, spans });
        }
        out.push((head(entry)?, scopes));
    }
    Ok(out)
}

/// Worker `w`'s request: its spans under their resources and scopes, as upb's `split_protobuf` writes it.
fn part(entries: &[Entry<'_>], w: usize) -> Vec<u8> {
    let mut request = Vec::new();
    for ((resource, resource_schema), scopes) in entries {
        let mut body = Vec::new();
        for scope in scopes.iter().filter(|s| s.spans.iter().any(|(_, x)| *x == w)) {
            let mut inner = Vec::new();
            if let Some(message) = scope.head.0 {
                field(&mut inner, 0x0a, message); // ScopeSpans.scope
            }
            for (span, _) in scope.spans.iter().filter(|(_, x)| *x == w) {
                field(&mut inner, 0x12, span); // ScopeSpans.spans
            }
            if !scope.head.1.is_empty() {
                field(&mut inner, 0x1a, scope.head.1); // ScopeSpans.schema_url
            }
            field(&mut body, 0x12, &inner); // ResourceSpans.scope_spans
        }
        if body.is_empty() {
            continue;
        }
        let mut entry = Vec::new();
        if let Some(message) = resource {
            field(&mut entry, 0x0a, message); // ResourceSpans.resource
        }
        entry.extend_from_slice(&body);
        if !resource_schema.is_empty() {
            field(&mut entry, 0x1a, resource_schema); // ResourceSpans.schema_url
        }
        field(&mut request, 0x0a, &entry); // ExportTraceServiceRequest.resource_spans
    }
    request
}

/// How many spans each of `workers` gets.
fn counts(entries: &[Entry<'_>], workers: usize) -> Vec<usize> {
    let mut counts = vec![0; workers];
    for (_, scopes) in entries {
        for scope in scopes {
            for (_, w) in &scope.spans {
                counts[*w] += 1;
            }
        }
    }
    counts
}

/// The spans per worker of a parsed request, counted without building a part (the admission check); `None` where
/// `split_protobuf` must read it.
#[pyfunction]
fn spans_per_worker(data: &[u8], workers: usize) -> Option<Vec<usize>> {
    let workers = workers.max(1);
    Some(counts(&routed(data, workers).ok()?, workers))
}

/// `[(worker, request bytes, spans)]` for each worker that gets spans, as `split.split_protobuf` gives them
/// (`None` where it must split the request itself). A request whose spans all go to one worker goes as it came.
#[pyfunction]
fn split_by_trace<'py>(py: Python<'py>, data: &[u8], workers: usize) -> PyResult<Option<Bound<'py, PyList>>> {
    let workers = workers.max(1);
    let Ok(entries) = routed(data, workers) else { return Ok(None) };
    let counts = counts(&entries, workers);
    let used: Vec<usize> = (0..workers).filter(|w| counts[*w] > 0).collect();
    let out = PyList::empty(py);
    for &w in &used {
        let body = if used.len() == 1 { PyBytes::new(py, data) } else { PyBytes::new(py, &part(&entries, w)) };
        out.append(PyTuple::new(py, [w.into_pyobject(py)?.into_any(), body.into_any(), counts[w].into_pyobject(py)?.into_any()])?)?;
    }
    Ok(Some(out))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(spans_per_worker, m)?)?;
    m.add_function(wrap_pyfunction!(split_by_trace, m)?)
}

