//! `messages.request_of`'s writing in Rust: the `ExportTraceServiceRequest` of the spans `serve` forwards, from the
//! messages they arrived as plus what the core appended, byte for byte as `messages._written_request` writes it.
//!
//! It walks the spans as `_written` does: a `MessageSpan` is its message; a copy of one (`EnrichedSpan`) is the
//! message plus the attributes and events it appended (the enricher's `_appended` counts, or the field-by-field
//! comparison with its original). It writes attribute values that are exactly str, float, bool, an int64, or a list
//! or tuple of those, and the SDK's `Event` with dict or mappingproxy attributes; any other value or event is written
//! by the Python helper (`_kv_bytes`, `_event_bytes`), so the two agree on which spans the SDK must encode (handed
//! back in a list, in order). A type where the Python writer takes a generic path, or a Python exception, hands the
//! whole request back (`None`): the Python writer then writes it.
use std::collections::HashMap as StdHashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;

use pyo3::exceptions::PyException;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMappingProxy, PySequence, PyString, PyTuple};
use pyo3::{ffi, PyTypeInfo};

use crate::proto::{field, field_len, varint, Out};
use crate::spans::{ctx, Fail, R};

/// Fx-style hashing: the maps here are keyed by addresses and short byte strings, none chosen by a sender.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline(always)]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline(always)]
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    #[inline(always)]
    fn write_u8(&mut self, n: u8) {
        self.write_u64(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type HashMap<K, V> = StdHashMap<K, V, BuildHasherDefault<Fx>>;

/// The Python helpers the writer defers to, and `messages._SHARED`, looked up once.
struct Helpers {
    kv_bytes: Py<PyAny>,
    event_bytes: Py<PyAny>,
    shared: Vec<Py<PyString>>,
}

static HELPERS: PyOnceLock<Helpers> = PyOnceLock::new();

fn helpers(py: Python<'_>) -> PyResult<&Helpers> {
    HELPERS.get_or_try_init(py, || {
        let m = py.import("otel_agent_eval.otlp.messages")?;
        let shared = m.getattr("_SHARED")?.try_iter()?.map(|x| Ok(x?.cast_into::<PyString>()?.unbind()));
        Ok::<_, PyErr>(Helpers {
            kv_bytes: m.getattr("_kv_bytes")?.unbind(),
            event_bytes: m.getattr("_event_bytes")?.unbind(),
            shared: shared.collect::<PyResult<_>>()?,
        })
    })
}

/// What one call needs: the types it checks for, the helpers, and its buffers (the spans' added bytes, one after
/// the other in `added`). The attributes many spans share (an enricher's catalog-fixed ones, an evaluation event's
/// read-only ones: `messages` caches the same) are written once a call, by identity: `shared` holds them meanwhile.
struct W<'py> {
    py: Python<'py>,
    message_span: &'py Bound<'py, PyAny>,
    event: &'py Bound<'py, PyAny>,
    h: &'py Helpers,
    added: Vec<u8>,
    value: Vec<u8>,
    event_buf: Vec<u8>,
    shared: HashMap<(usize, u8), (Bound<'py, PyAny>, Range<usize>)>,
    shared_bytes: Vec<u8>,
}

/// `o.__dict__` (what its `__dict__` descriptor gives, without looking it up).
fn dict_of<'py>(o: &Bound<'py, PyAny>) -> R<Bound<'py, PyDict>> {
    let d = unsafe { ffi::PyObject_GenericGetDict(o.as_ptr(), std::ptr::null_mut()) };
    Ok(unsafe { Bound::from_owned_ptr_or_err(o.py(), d)? }.cast_into_exact::<PyDict>().map_err(|_| Fail::Unmodelled)?)
}

/// `o` as exactly a `T` (not a subclass), or handed back.
fn exact<'a, 'py, T: PyTypeInfo>(o: &'a Bound<'py, PyAny>) -> R<&'a Bound<'py, T>> {
    o.cast_exact::<T>().map_err(|_| Fail::Unmodelled)
}

/// `d.get(key)`, None when missing.
#[inline(always)]
fn lookup<'py>(d: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> R<Option<Bound<'py, PyAny>>> {
    unsafe {
        let v = ffi::PyDict_GetItemWithError(d.as_ptr(), key.as_ptr());
        if v.is_null() {
            return match PyErr::take(d.py()) {
                Some(e) => Err(e.into()),
                None => Ok(None),
            };
        }
        Ok(Some(Bound::from_borrowed_ptr(d.py(), v)))
    }
}

/// `d[key]`, a missing key handed back (the Python writer raises KeyError).
fn item<'py>(d: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> R<Bound<'py, PyAny>> {
    lookup(d, key)?.ok_or(Fail::Unmodelled)
}

/// `d.get(key)`.
fn get<'py>(d: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> R<Bound<'py, PyAny>> {
    Ok(lookup(d, key)?.unwrap_or_else(|| d.py().None().into_bound(d.py())))
}

fn exact_usize(o: &Bound<'_, PyAny>) -> R<usize> {
    if !o.is_exact_instance_of::<PyInt>() {
        return Err(Fail::Unmodelled);
    }
    o.extract::<usize>().map_err(|_| Fail::Unmodelled)
}

/// A tuple or list (what the core's events are, and the spans given).
fn sequence<'a, 'py>(o: &'a Bound<'py, PyAny>) -> R<&'a Bound<'py, PySequence>> {
    if !(o.is_exact_instance_of::<PyTuple>() || o.is_exact_instance_of::<PyList>()) {
        return Err(Fail::Unmodelled);
    }
    Ok(unsafe { o.cast_unchecked::<PySequence>() })
}

/// Calls `f` on the items of a dict or mappingproxy after the first `skip`, until it says false.
fn for_items<'py>(
    m: &Bound<'py, PyAny>,
    skip: usize,
    mut f: impl FnMut(&Bound<'py, PyAny>, &Bound<'py, PyAny>) -> R<bool>,
) -> R<bool> {
    let py = m.py();
    if m.is_exact_instance_of::<PyDict>() {
        // PyDict_Next with the key and value held while `f` runs (it may call Python)
        let (mut pos, mut i): (ffi::Py_ssize_t, usize) = (0, 0);
        let (mut k, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
        while unsafe { ffi::PyDict_Next(m.as_ptr(), &mut pos, &mut k, &mut v) } != 0 {
            i += 1;
            if i > skip {
                let (k, v) = unsafe { (Bound::from_borrowed_ptr(py, k), Bound::from_borrowed_ptr(py, v)) };
                if !f(&k, &v)? {
                    return Ok(false);
                }
            }
        }
        return Ok(true);
    }
    for pair in exact::<PyMappingProxy>(m)?.call_method0(intern!(py, "items"))?.try_iter()?.skip(skip) {
        let pair = pair?;
        let pair = exact::<PyTuple>(&pair)?;
        if pair.len() != 2 {
            return Err(Fail::Unmodelled);
        }
        if !f(&pair.get_item(0)?, &pair.get_item(1)?)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A value's `AnyValue` as the SDK's encoder writes it, when it is one written here; false when not.
fn any_value(out: &mut Vec<u8>, v: &Bound<'_, PyAny>, nested: bool) -> bool {
    if let Ok(s) = v.cast_exact::<PyString>() {
        let Ok(s) = s.to_str() else { return false }; // a lone surrogate
        field(out, 0x0a, s.as_bytes()); // AnyValue.string_value
    } else if let Ok(f) = v.cast_exact::<PyFloat>() {
        out.push(0x21); // AnyValue.double_value, fixed64
        out.extend_from_slice(&f.value().to_bits().to_le_bytes());
    } else if v.is_exact_instance_of::<PyBool>() {
        out.extend_from_slice(&[0x10, v.is(&PyBool::new(v.py(), true)) as u8]); // AnyValue.bool_value
    } else if v.is_exact_instance_of::<PyInt>() {
        let Ok(n) = v.extract::<i64>() else { return false }; // beyond int64: the SDK's encoder refuses it
        out.push(0x18); // AnyValue.int_value: a negative one as 10 bytes
        varint(out, n as u64);
    } else if !nested && (v.is_exact_instance_of::<PyList>() || v.is_exact_instance_of::<PyTuple>()) {
        let mut values = Vec::new();
        let mut one = Vec::new();
        let Ok(items) = v.try_iter() else { return false };
        for x in items {
            one.clear();
            let Ok(x) = x else { return false };
            if !any_value(&mut one, &x, true) {
                return false;
            }
            field(&mut values, 0x0a, &one); // ArrayValue.values
        }
        field(out, 0x2a, &values); // AnyValue.array_value
    } else {
        return false;
    }
    true
}

impl<'py> W<'py> {
    /// Appends one `KeyValue` field under `tag` to `out` as `_kv_bytes` writes it; false when it says None.
    fn key_value(&mut self, out: &mut Vec<u8>, tag: u8, key: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>) -> R<bool> {
        self.value.clear();
        if let Ok(k) = key.cast_exact::<PyString>() {
            if let Ok(k) = k.to_str() {
                if any_value(&mut self.value, value, false) {
                    let head = if k.is_empty() { 0 } else { field_len(k.len()) }; // proto3: an empty key is not written
                    out.push(tag);
                    varint(out, (head + field_len(self.value.len())) as u64);
                    if !k.is_empty() {
                        field(out, 0x0a, k.as_bytes()); // KeyValue.key
                    }
                    field(out, 0x12, &self.value); // KeyValue.value
                    return Ok(true);
                }
            }
        }
        let kv = self.h.kv_bytes.bind(self.py).call1((key, value))?;
        if kv.is_none() {
            return Ok(false);
        }
        field(out, tag, exact::<PyBytes>(&kv)?.as_bytes());
        Ok(true)
    }

    /// `_fields_of(tag, islice(attributes.items(), skip, None))` appended to `out`; false when it gives None.
    fn attributes(&mut self, out: &mut Vec<u8>, tag: u8, attributes: &Bound<'py, PyAny>, skip: usize) -> R<bool> {
        for_items(attributes, skip, |k, v| self.key_value(out, tag, k, v))
    }

    /// `attributes` of a mapping many spans share: written once a call.
    fn shared_attributes(&mut self, out: &mut Vec<u8>, tag: u8, attributes: &Bound<'py, PyAny>) -> R<bool> {
        let key = (attributes.as_ptr() as usize, tag);
        if let Some((_, at)) = self.shared.get(&key) {
            out.extend_from_slice(&self.shared_bytes[at.clone()]);
            return Ok(true);
        }
        let start = out.len();
        if !self.attributes(out, tag, attributes, 0)? {
            return Ok(false);
        }
        let at = self.shared_bytes.len();
        self.shared_bytes.extend_from_slice(&out[start..]);
        self.shared.insert(key, (attributes.clone(), at..self.shared_bytes.len()));
        Ok(true)
    }

    /// `_add_events` with `events[from:]`, into `added`.
    fn events(&mut self, events: &Bound<'py, PyAny>, from: usize) -> R<bool> {
        let events = sequence(events)?;
        for i in from..events.len()? {
            if !self.event(&events.get_item(i)?)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One `Span.events` field as `_event_bytes` writes it, appended to `added`; false when it gives None.
    fn event(&mut self, event: &Bound<'py, PyAny>) -> R<bool> {
        let py = self.py;
        if event.get_type().is(self.event) {
            let attributes = event.getattr(intern!(py, "_attributes"))?;
            if attributes.is_exact_instance_of::<PyDict>() || attributes.is_exact_instance_of::<PyMappingProxy>() {
                let time = event.getattr(intern!(py, "_timestamp"))?;
                let name = event.getattr(intern!(py, "_name"))?;
                // a time that is None, 0 or a uint64, a name that is None or text: anything else is _event_bytes'
                let time = match () {
                    _ if time.is_none() => Some(0),
                    _ if time.is_exact_instance_of::<PyInt>() => time.extract::<u64>().ok(),
                    _ => None,
                };
                let name = match name.cast_exact::<PyString>() {
                    Ok(text) => text.to_str().ok(),
                    Err(_) => name.is_none().then_some(""),
                };
                if let (Some(time), Some(name)) = (time, name) {
                    let mut out = std::mem::take(&mut self.event_buf);
                    out.clear();
                    if time != 0 {
                        out.push(0x09); // Event.time_unix_nano, fixed64
                        out.extend_from_slice(&time.to_le_bytes());
                    }
                    if !name.is_empty() {
                        field(&mut out, 0x12, name.as_bytes()); // Event.name
                    }
                    let written = if attributes.is_exact_instance_of::<PyMappingProxy>() {
                        self.shared_attributes(&mut out, 0x1a, &attributes) // Event.attributes
                    } else {
                        self.attributes(&mut out, 0x1a, &attributes, 0)
                    };
                    if let Ok(true) = written {
                        field(&mut self.added, 0x5a, &out); // Span.events
                    }
                    self.event_buf = out;
                    return written;
                }
            }
        }
        let data = self.h.event_bytes.bind(py).call1((event,))?;
        if data.is_none() {
            return Ok(false);
        }
        field(&mut self.added, 0x5a, exact::<PyBytes>(&data)?.as_bytes());
        Ok(true)
    }

    /// `_written`: the `__dict__` of the kept span whose message `span` is (with what it added appended to
    /// `added`), or None when the SDK must encode it.
    fn written(&mut self, span: &Bound<'py, PyAny>) -> R<Option<Bound<'py, PyDict>>> {
        let py = self.py;
        if span.get_type().is(self.message_span) {
            return Ok(Some(dict_of(span)?));
        }
        let mine = dict_of(span)?;
        let mut original = get(&mine, intern!(py, "_original"))?;
        while !original.get_type().is(self.message_span) {
            if original.is_none() {
                return Ok(None);
            }
            original = get(&dict_of(&original)?, intern!(py, "_original"))?;
        }
        let theirs = dict_of(&original)?;
        let appended = get(&mine, intern!(py, "_appended"))?;
        if !appended.is_none() && item(&mine, intern!(py, "_original"))?.is(&original) {
            let appended = exact::<PyTuple>(&appended)?;
            if appended.len() != 3 {
                return Err(Fail::Unmodelled);
            }
            let (n, m) = (exact_usize(&appended.get_item(0)?)?, exact_usize(&appended.get_item(1)?)?);
            let fixed = appended.get_item(2)?;
            let mut added = std::mem::take(&mut self.added);
            let mut ok = self.shared_attributes(&mut added, 0x4a, &fixed); // Span.attributes: the catalog-fixed part
            if let Ok(true) = ok {
                let attributes = item(&mine, intern!(py, "_attributes"))?;
                let skip = n.saturating_add(fixed.len()?);
                ok = self.attributes(&mut added, 0x4a, &attributes, skip); // the per-call part
            }
            self.added = added;
            if !ok? || !self.events(&item(&mine, intern!(py, "_events"))?, m)? {
                return Ok(None);
            }
            return Ok(Some(theirs));
        }
        for name in &self.h.shared {
            let name = name.bind(py);
            if !get(&mine, name)?.is(&item(&theirs, name)?) {
                return Ok(None);
            }
        }
        let (attrs, base) = (get(&mine, intern!(py, "_attributes"))?, item(&theirs, intern!(py, "_attributes"))?);
        if !attrs.is(&base) {
            let base = exact::<PyDict>(&base)?;
            let Ok(attrs) = attrs.cast_exact::<PyDict>() else { return Ok(None) };
            let n = base.len();
            if attrs.len() < n || !same_start(attrs, base)? {
                return Ok(None);
            }
            let mut added = std::mem::take(&mut self.added);
            let ok = self.attributes(&mut added, 0x4a, attrs.as_any(), n); // Span.attributes
            self.added = added;
            if !ok? {
                return Ok(None);
            }
        }
        let (events, own) = (get(&mine, intern!(py, "_events"))?, item(&theirs, intern!(py, "_events"))?);
        if !events.is(&own) {
            let (mine_, own) = (sequence(&events)?, sequence(&own)?);
            let n = own.len()?;
            if mine_.len()? < n {
                return Ok(None);
            }
            for i in 0..n {
                if !mine_.get_item(i)?.is(&own.get_item(i)?) {
                    return Ok(None);
                }
            }
            if !self.events(&events, n)? {
                return Ok(None);
            }
        }
        Ok(Some(theirs))
    }
}

/// Whether `attrs` starts with `base`: its keys equal (`list(islice(attrs, n)) == list(base)`), then its values
/// the same objects.
fn same_start(attrs: &Bound<'_, PyDict>, base: &Bound<'_, PyDict>) -> R<bool> {
    let n = base.len();
    let mut head = Vec::with_capacity(n);
    for_items(attrs.as_any(), 0, |k, v| {
        head.push((k.clone(), v.clone()));
        Ok(head.len() < n)
    })?;
    let mut i = 0;
    let at = |i: &mut usize| -> R<usize> {
        *i += 1;
        if *i > head.len() { Err(Fail::Unmodelled) } else { Ok(*i - 1) } // base grew meanwhile (a key's __eq__)
    };
    if !for_items(base.as_any(), 0, |k, _| {
        let a = &head[at(&mut i)?].0;
        Ok(a.is(k) || a.eq(k)?)
    })? {
        return Ok(false);
    }
    let mut i = 0;
    for_items(base.as_any(), 0, |_, v| Ok(head[at(&mut i)?].1.is(v)))
}

/// `(resource_key, scope_key)` of an `Origin`, as bytes.
type Keys = ((Vec<u8>, Vec<u8>), (Option<Vec<u8>>, Vec<u8>));

fn keys_of(origin: &Bound<'_, PyAny>) -> R<Keys> {
    let py = origin.py();
    let pair = |name| -> R<(Bound<'_, PyAny>, Vec<u8>)> {
        let key = origin.getattr(name)?;
        let key = exact::<PyTuple>(&key)?;
        if key.len() != 2 {
            return Err(Fail::Unmodelled);
        }
        let schema = key.get_item(1)?;
        let schema = exact::<PyString>(&schema)?.to_str().map_err(|_| Fail::Unmodelled)?;
        Ok((key.get_item(0)?, schema.as_bytes().to_vec()))
    };
    let message = |o: Bound<'_, PyAny>| -> R<Vec<u8>> { Ok(exact::<PyBytes>(&o)?.as_bytes().to_vec()) };
    let (resource, resource_schema) = pair(intern!(py, "resource_key"))?;
    let (scope, scope_schema) = pair(intern!(py, "scope_key"))?;
    let scope = if scope.is_none() { None } else { Some(message(scope)?) };
    Ok(((message(resource)?, resource_schema), (scope, scope_schema)))
}

struct Scope<'py> {
    key: (Option<Vec<u8>>, Vec<u8>),
    spans: Vec<(Bound<'py, PyBytes>, Range<usize>)>,
}

struct Resource<'py> {
    key: (Vec<u8>, Vec<u8>),
    scopes: Vec<Scope<'py>>,
    index: HashMap<(Option<Vec<u8>>, Vec<u8>), usize>,
}

fn span_len((message, range): &(Bound<'_, PyBytes>, Range<usize>)) -> usize {
    message.as_bytes().len() + range.len()
}

fn scope_len(scope: &Scope<'_>) -> usize {
    scope.key.0.as_ref().map_or(0, |s| field_len(s.len()))
        + scope.spans.iter().map(|s| field_len(span_len(s))).sum::<usize>()
        + if scope.key.1.is_empty() { 0 } else { field_len(scope.key.1.len()) }
}

/// A buffer of the size computed beforehand, written once: `ok` says it was filled exactly.
struct Sized<'a> {
    buf: &'a mut [u8],
    at: usize,
    ok: bool,
}

impl Out for Sized<'_> {
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        match self.buf.get_mut(self.at..self.at + b.len()) {
            Some(room) => room.copy_from_slice(b),
            None => self.ok = false,
        }
        self.at += b.len();
    }
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.put(&[b]);
    }
}

/// The request `_written_request` writes for the grouped spans, written into the bytes object it returns.
fn request<'py>(py: Python<'py>, added: &[u8], resources: &[Resource<'_>]) -> R<Bound<'py, PyBytes>> {
    let sizes: Vec<Vec<usize>> = resources.iter().map(|r| r.scopes.iter().map(scope_len).collect()).collect();
    let bodies: Vec<usize> = resources
        .iter()
        .zip(&sizes)
        .map(|(r, s)| {
            let schema = if r.key.1.is_empty() { 0 } else { field_len(r.key.1.len()) };
            field_len(r.key.0.len()) + s.iter().map(|n| field_len(*n)).sum::<usize>() + schema
        })
        .collect();
    let size = bodies.iter().map(|n| field_len(*n)).sum();
    // a bytes object left uninitialized, as PyBytes_FromStringAndSize(NULL, size) makes it, filled below
    let data = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), size as ffi::Py_ssize_t) };
    let data = unsafe { Bound::from_owned_ptr_or_err(py, data)? };
    let buf = unsafe { std::slice::from_raw_parts_mut(ffi::PyBytes_AsString(data.as_ptr()) as *mut u8, size) };
    let mut out = Sized { buf, at: 0, ok: true };
    for ((r, scope_sizes), body) in resources.iter().zip(&sizes).zip(&bodies) {
        out.byte(0x0a); // ExportTraceServiceRequest.resource_spans
        varint(&mut out, *body as u64);
        field(&mut out, 0x0a, &r.key.0); // ResourceSpans.resource
        for (s, size) in r.scopes.iter().zip(scope_sizes) {
            out.byte(0x12); // ResourceSpans.scope_spans
            varint(&mut out, *size as u64);
            if let Some(scope) = &s.key.0 {
                field(&mut out, 0x0a, scope); // ScopeSpans.scope
            }
            for one in &s.spans {
                out.byte(0x12); // ScopeSpans.spans
                varint(&mut out, span_len(one) as u64);
                out.put(one.0.as_bytes());
                out.put(&added[one.1.clone()]);
            }
            if !s.key.1.is_empty() {
                field(&mut out, 0x1a, &s.key.1); // ScopeSpans.schema_url
            }
        }
        if !r.key.1.is_empty() {
            field(&mut out, 0x1a, &r.key.1); // ResourceSpans.schema_url
        }
    }
    if !out.ok || out.at != size {
        return Err(Fail::Unmodelled); // not reached: the sizes are those of what is written
    }
    Ok(data.cast_into::<PyBytes>().map_err(PyErr::from)?)
}

fn write<'py>(py: Python<'py>, spans: &Bound<'py, PyAny>) -> R<Bound<'py, PyTuple>> {
    let c = ctx(py)?;
    let mut w = W {
        py,
        message_span: c.message_span.bind(py),
        event: c.event_cls.bind(py),
        h: helpers(py)?,
        added: Vec::new(),
        value: Vec::new(),
        event_buf: Vec::new(),
        shared: HashMap::default(),
        shared_bytes: Vec::new(),
    };
    let noise_cls = c.noise_cls.bind(py);
    let others = PyList::empty(py);
    let mut resources: Vec<Resource<'py>> = Vec::new();
    let mut by_key: HashMap<(Vec<u8>, Vec<u8>), usize> = HashMap::default();
    let mut by_origin: HashMap<usize, (usize, usize)> = HashMap::default();
    let mut origins: Vec<Bound<'py, PyAny>> = Vec::new(); // held: their addresses key by_origin
    let mut last: (usize, (usize, usize)) = (0, (0, 0)); // the last origin: most spans come with the one before
    let spans = sequence(spans)?; // a list or tuple: an iterator handed back would be spent
    for i in 0..spans.len()? {
        let span = spans.get_item(i)?;
        let start = w.added.len();
        let (message, origin) = if span.get_type().is(noise_cls) {
            // a span that cannot matter (messages.Noise): its kept message and origin, passed on as they came
            let t = span.cast::<PyTuple>().map_err(|_| Fail::Unmodelled)?;
            let message = t.get_item(6)?.cast_into_exact::<PyBytes>().map_err(|_| Fail::Unmodelled)?;
            (message, t.get_item(7)?)
        } else {
            let Some(d) = w.written(&span)? else {
                w.added.truncate(start);
                others.append(span)?;
                continue;
            };
            let message = item(&d, intern!(py, "_message"))?.cast_into_exact::<PyBytes>().map_err(|_| Fail::Unmodelled)?;
            (message, item(&d, intern!(py, "_origin"))?)
        };
        let at = origin.as_ptr() as usize;
        let (r, s) = match if last.0 == at { Some(&last.1) } else { by_origin.get(&at) } {
            Some(found) => *found,
            None => {
                let (resource_key, scope_key) = keys_of(&origin)?;
                let r = *by_key.entry(resource_key.clone()).or_insert_with(|| {
                    resources.push(Resource { key: resource_key, scopes: Vec::new(), index: HashMap::default() });
                    resources.len() - 1
                });
                let resource = &mut resources[r];
                let s = *resource.index.entry(scope_key.clone()).or_insert_with(|| {
                    resource.scopes.push(Scope { key: scope_key, spans: Vec::new() });
                    resource.scopes.len() - 1
                });
                by_origin.insert(at, (r, s));
                origins.push(origin);
                (r, s)
            }
        };
        last = (at, (r, s));
        resources[r].scopes[s].spans.push((message, start..w.added.len()));
    }
    let data = request(py, &w.added, &resources)?;
    Ok(PyTuple::new(py, [data.into_any(), others.into_any()])?)
}

/// `(bytes, spans the SDK must encode)` as `messages._written_request(spans)` gives them, or `None` where that
/// writer must write the request (the SDK's part is written by the caller, last: requests concatenate).
#[pyfunction]
fn request_of<'py>(py: Python<'py>, spans: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    match write(py, spans) {
        Ok(out) => Ok(Some(out)),
        Err(Fail::Py(e)) if !e.is_instance_of::<PyException>(py) => Err(e), // KeyboardInterrupt and the like
        Err(_) => Ok(None),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(request_of, m)?)
}
