//! The Python objects the native readers build, as the Python readers build them: the SDK's `ReadableSpan`
//! (its `__dict__` set directly), `SpanContext` tuples, attribute dicts, and the types and shared values they need,
//! looked up once.
use std::os::raw::c_char;
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

// ------------------------------------------------------------------------------------------------
// errors

pub(crate) enum Fail {
    Unmodelled,       // read as upb would not, or not at all: the Python reader reads the request
    Problem(String),  // one span is skipped and counted, in the Python reader's words
    Py(PyErr),
}
impl From<PyErr> for Fail {
    fn from(e: PyErr) -> Self {
        Fail::Py(e)
    }
}
pub(crate) type R<T> = Result<T, Fail>;

// ------------------------------------------------------------------------------------------------
// python objects needed, looked up once

pub(crate) struct Ctx {
    pub(crate) readable_span: Py<PyAny>,
    pub(crate) message_span: Py<PyAny>,
    pub(crate) span_context: Py<PyAny>,
    pub(crate) flags: Vec<Py<PyAny>>,
    pub(crate) default_state: Py<PyAny>,
    pub(crate) default_options: Py<PyAny>,
    pub(crate) kinds: Vec<Py<PyAny>>,
    pub(crate) internal: Py<PyAny>,
    pub(crate) ok: Py<PyAny>,
    pub(crate) unset: Py<PyAny>,
    pub(crate) error: Py<PyAny>,
    pub(crate) status_cls: Py<PyAny>,
    pub(crate) event_cls: Py<PyAny>,
    pub(crate) link_cls: Py<PyAny>,
    pub(crate) resource_cls: Py<PyAny>,
    pub(crate) scope_cls: Py<PyAny>,
    pub(crate) origin_cls: Py<PyAny>,
    pub(crate) noise_cls: Py<PyAny>,
    pub(crate) from_header: Py<PyAny>,
    pub(crate) remote_kw: Py<PyDict>,
    pub(crate) empty: Py<PyTuple>,
    pub(crate) k: [Py<PyString>; 16],
}

pub(crate) const KEYS: [&str; 16] = [
    "_name", "_context", "_kind", "_instrumentation_info", "_instrumentation_scope", "_parent", "_start_time",
    "_end_time", "_attributes", "_events", "_links", "_resource", "_status", "_message", "_origin", "__dict__",
];

static CTX: PyOnceLock<Ctx> = PyOnceLock::new();

pub(crate) fn ctx(py: Python<'_>) -> PyResult<&Ctx> {
    CTX.get_or_try_init(py, || {
        let sdk = py.import("opentelemetry.sdk.trace")?;
        let api = py.import("opentelemetry.trace")?;
        let span_mod = py.import("opentelemetry.trace.span")?;
        let ps = py.import("otel_agent_eval.otlp.proto_spans")?;
        let msgs = py.import("otel_agent_eval.otlp.messages")?;
        let js = py.import("otel_agent_eval.otlp.json_spans")?;
        let flags: Vec<Py<PyAny>> = ps.getattr("_FLAGS")?.try_iter()?.map(|x| x.map(|x| x.unbind())).collect::<PyResult<_>>()?;
        let kinds: Vec<Py<PyAny>> = ps.getattr("_KINDS")?.try_iter()?.map(|x| x.map(|x| x.unbind())).collect::<PyResult<_>>()?;
        let kw = PyDict::new(py);
        kw.set_item("is_remote", true)?;
        let k = KEYS.map(|s| PyString::intern(py, s).unbind());
        Ok::<_, PyErr>(Ctx {
            readable_span: sdk.getattr("ReadableSpan")?.unbind(),
            message_span: msgs.getattr("MessageSpan")?.unbind(),
            span_context: api.getattr("SpanContext")?.unbind(),
            flags,
            default_state: span_mod.getattr("DEFAULT_TRACE_STATE")?.unbind(),
            default_options: span_mod.getattr("DEFAULT_TRACE_OPTIONS")?.unbind(),
            internal: api.getattr("SpanKind")?.getattr("INTERNAL")?.unbind(),
            kinds,
            ok: ps.getattr("_OK")?.unbind(),
            unset: js.getattr("UNSET")?.unbind(),
            error: api.getattr("StatusCode")?.getattr("ERROR")?.unbind(),
            status_cls: api.getattr("Status")?.unbind(),
            event_cls: sdk.getattr("Event")?.unbind(),
            link_cls: api.getattr("Link")?.unbind(),
            resource_cls: py.import("opentelemetry.sdk.resources")?.getattr("Resource")?.unbind(),
            scope_cls: py.import("opentelemetry.sdk.util.instrumentation")?.getattr("InstrumentationScope")?.unbind(),
            origin_cls: msgs.getattr("Origin")?.unbind(),
            noise_cls: msgs.getattr("Noise")?.unbind(),
            from_header: api.getattr("TraceState")?.getattr("from_header")?.unbind(),
            remote_kw: kw.unbind(),
            empty: PyTuple::empty(py).unbind(),
            k,
        })
    })
}

// ------------------------------------------------------------------------------------------------
// small constructors

#[inline(always)]
pub(crate) fn string<'py>(py: Python<'py>, b: &[u8]) -> R<Bound<'py, PyAny>> {
    unsafe {
        let p = ffi::PyUnicode_DecodeUTF8(b.as_ptr() as *const c_char, b.len() as ffi::Py_ssize_t, c"strict".as_ptr());
        if p.is_null() {
            ffi::PyErr_Clear();
            return Err(Fail::Unmodelled); // upb refuses it first
        }
        Ok(Bound::from_owned_ptr(py, p))
    }
}

#[inline(always)]
pub(crate) fn bytes<'py>(py: Python<'py>, b: &[u8]) -> Bound<'py, PyAny> {
    PyBytes::new(py, b).into_any()
}

#[inline(always)]
pub(crate) fn u64_int<'py>(py: Python<'py>, v: u64) -> Bound<'py, PyAny> {
    unsafe { Bound::from_owned_ptr(py, ffi::PyLong_FromUnsignedLongLong(v)) }
}

#[inline(always)]
pub(crate) fn time_or_none<'py>(py: Python<'py>, v: u64) -> Bound<'py, PyAny> {
    if v == 0 { py.None().into_bound(py) } else { u64_int(py, v) }
}

pub(crate) fn id_int<'py>(py: Python<'py>, raw: &[u8], size: usize, field: &str) -> R<Bound<'py, PyAny>> {
    if raw.len() != size {
        return Err(Fail::Problem(format!("{field} has {} bytes, not {size}", raw.len())));
    }
    let v = if size == 16 {
        let n = u128::from_be_bytes(raw.try_into().unwrap());
        if n == 0 {
            return Err(Fail::Problem(format!("{field} is all zeros (invalid)")));
        }
        n.into_pyobject(py).unwrap().into_any()
    } else {
        let n = u64::from_be_bytes(raw.try_into().unwrap());
        if n == 0 {
            return Err(Fail::Problem(format!("{field} is all zeros (invalid)")));
        }
        u64_int(py, n)
    };
    Ok(v)
}

/// tuple.__new__(SpanContext, items): what tuple_subtype_new does, without the intermediate tuple.
pub(crate) fn span_context<'py>(py: Python<'py>, c: &Ctx, items: [Bound<'py, PyAny>; 6]) -> R<Bound<'py, PyAny>> {
    tuple_of(py, &c.span_context, items)
}

/// tuple.__new__(cls, items) for a tuple subclass `cls` (SpanContext, messages.Noise).
pub(crate) fn tuple_of<'py, const N: usize>(py: Python<'py>, cls: &Py<PyAny>, items: [Bound<'py, PyAny>; N]) -> R<Bound<'py, PyAny>> {
    unsafe {
        let tp = cls.as_ptr() as *mut ffi::PyTypeObject;
        let obj = ((*tp).tp_alloc.unwrap())(tp, N as ffi::Py_ssize_t);
        if obj.is_null() {
            return Err(PyErr::fetch(py).into());
        }
        for (i, it) in items.into_iter().enumerate() {
            ffi::PyTuple_SET_ITEM(obj, i as ffi::Py_ssize_t, it.into_ptr());
        }
        Ok(Bound::from_owned_ptr(py, obj))
    }
}

pub(crate) fn new_object<'py>(py: Python<'py>, c: &Ctx, cls: &Py<PyAny>) -> R<Bound<'py, PyAny>> {
    unsafe {
        let tp = cls.as_ptr() as *mut ffi::PyTypeObject;
        let obj = ((*ptr::addr_of_mut!(ffi::PyBaseObject_Type)).tp_new.unwrap())(tp, c.empty.as_ptr(), ptr::null_mut());
        Ok(Bound::from_owned_ptr_or_err(py, obj)?)
    }
}

// ------------------------------------------------------------------------------------------------
// per-call cache of short strings (keys, names, short values): one str object per distinct bytes in a request

pub(crate) const SLOTS: usize = 1024;
pub(crate) const CACHED_LEN: usize = 48;

pub(crate) struct Cache<'a> {
    slots: Vec<(&'a [u8], *mut ffi::PyObject)>,
}

impl<'a> Cache<'a> {
    pub(crate) fn new() -> Self {
        Cache { slots: vec![(&b""[..], ptr::null_mut()); SLOTS] }
    }
    #[inline(always)]
    pub(crate) fn str<'py>(&mut self, py: Python<'py>, b: &'a [u8]) -> R<Bound<'py, PyAny>> {
        if b.len() > CACHED_LEN || b.is_empty() {
            return string(py, b);
        }
        let mut h: u64 = 0xcbf29ce484222325;
        for &x in b {
            h = (h ^ x as u64).wrapping_mul(0x100000001b3);
        }
        let slot = &mut self.slots[(h as usize ^ (h >> 32) as usize) & (SLOTS - 1)];
        unsafe {
            if !slot.1.is_null() && slot.0 == b {
                return Ok(Bound::from_borrowed_ptr(py, slot.1));
            }
            let s = string(py, b)?;
            if !slot.1.is_null() {
                ffi::Py_DECREF(slot.1);
            }
            *slot = (b, s.clone().into_ptr());
            Ok(s)
        }
    }
}

impl Drop for Cache<'_> {
    fn drop(&mut self) {
        // dropped inside spans_of_request_bytes, with the GIL held
        for (_, o) in self.slots.iter() {
            if !o.is_null() {
                unsafe { ffi::Py_DECREF(*o) };
            }
        }
    }
}

#[inline(always)]
pub(crate) fn set(d: &Bound<'_, PyDict>, k: &Py<PyString>, v: Bound<'_, PyAny>) -> R<()> {
    if unsafe { ffi::PyDict_SetItem(d.as_ptr(), k.as_ptr(), v.as_ptr()) } < 0 {
        return Err(PyErr::fetch(d.py()).into());
    }
    Ok(())
}

pub(crate) fn presized<'py>(py: Python<'py>, n: usize) -> R<Bound<'py, PyDict>> {
    unsafe { Ok(Bound::from_owned_ptr_or_err(py, ffi::_PyDict_NewPresized(n as ffi::Py_ssize_t))?.cast_into_unchecked()) }
}

/// `object.__new__(cls)` then `obj.__dict__ = d`, without object_new's inline values that the assignment discards:
/// tp_alloc, then the assignment through the type's `__dict__` descriptor, as Python's own `obj.__dict__ = d` makes
/// it. Not `PyObject_GenericSetDict`: on Python 3.13 it stores `d` but leaves the object's (empty) inline values in
/// force, and attribute reads then miss every key of `d`.
pub(crate) fn with_dict<'py>(py: Python<'py>, c: &Ctx, cls: &Py<PyAny>, d: &Bound<'py, PyDict>) -> R<Bound<'py, PyAny>> {
    unsafe {
        let tp = cls.as_ptr() as *mut ffi::PyTypeObject;
        let o = Bound::from_owned_ptr_or_err(py, ((*tp).tp_alloc.unwrap())(tp, 0))?;
        if ffi::PyObject_SetAttr(o.as_ptr(), c.k[15].as_ptr(), d.as_ptr()) < 0 {
            return Err(PyErr::fetch(py).into());
        }
        Ok(o)
    }
}
