//! OTLP protobuf `ExportTraceServiceRequest` bytes into the SDK's `ReadableSpan`s, as `proto_spans.spans_of_request`
//! builds them from the upb-parsed message (same `__dict__`, contexts, attributes, events, links, status; with
//! `keep`, a `MessageSpan` with its serialized message and `Origin`).
//!
//! It reads the wire format itself (zero-copy slices over the input) and is only called on bytes upb accepts
//! (checked as upb checks them by `check.rs`, or parsed by upb), so the input is valid protobuf with valid UTF-8. What it does not model as upb does, it hands back
//! (`None`): a singular sub-message written more than once (resource, scope, a span's status, a KeyValue's value,
//! an AnyValue's array or kvlist: protobuf merges those), and anything its reader refuses. A span's message is its bytes as they
//! came (upb writes the same bytes back for the canonical encoding every OpenTelemetry SDK writes).
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::spans::{
    bytes, ctx, id_int, new_object, presized, set, span_context, string, time_or_none, tuple_of, u64_int, with_dict, Cache, Ctx, Fail, R,
};

const MAX_DEPTH: usize = 16;
const HAS_IS_REMOTE: u32 = 0x100;
const REMOTE: u32 = 0x300;

// ------------------------------------------------------------------------------------------------
// wire reader

pub(crate) struct Rd<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Rd<'a> {
    #[inline(always)]
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Rd { b, p: 0 }
    }
    #[inline(always)]
    pub(crate) fn more(&self) -> bool {
        self.p < self.b.len()
    }
    #[inline(always)]
    fn varint(&mut self) -> R<u64> {
        let mut r: u64 = 0;
        let mut s: u32 = 0;
        loop {
            let Some(&c) = self.b.get(self.p) else { return Err(Fail::Unmodelled) };
            self.p += 1;
            r |= ((c & 0x7f) as u64) << s;
            if c < 0x80 {
                return Ok(r);
            }
            s += 7;
            if s > 63 {
                return Err(Fail::Unmodelled);
            }
        }
    }
    #[inline(always)]
    pub(crate) fn tag(&mut self) -> R<(u64, u8)> {
        let t = self.varint()?;
        if t >> 3 == 0 {
            return Err(Fail::Unmodelled);
        }
        Ok((t >> 3, (t & 7) as u8))
    }
    #[inline(always)]
    pub(crate) fn ld(&mut self) -> R<&'a [u8]> {
        let n = self.varint()?;
        if n > (self.b.len() - self.p) as u64 {
            return Err(Fail::Unmodelled);
        }
        let n = n as usize;
        let s = &self.b[self.p..self.p + n];
        self.p += n;
        Ok(s)
    }
    #[inline(always)]
    fn fixed(&mut self, n: usize) -> R<u64> {
        if self.b.len() - self.p < n {
            return Err(Fail::Unmodelled);
        }
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(&self.b[self.p..self.p + n]);
        self.p += n;
        Ok(u64::from_le_bytes(v))
    }
    pub(crate) fn skip(&mut self, wt: u8) -> R<()> {
        match wt {
            0 => self.varint().map(|_| ()),
            1 => self.fixed(8).map(|_| ()),
            2 => self.ld().map(|_| ()),
            5 => self.fixed(4).map(|_| ()),
            _ => Err(Fail::Unmodelled), // groups
        }
    }
}

// ------------------------------------------------------------------------------------------------
// wire writer

/// Where the wire writer writes: a growing `Vec`, or a buffer sized beforehand.
pub(crate) trait Out {
    fn put(&mut self, b: &[u8]);
    fn byte(&mut self, b: u8);
}

impl Out for Vec<u8> {
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.push(b);
    }
}

#[inline(always)]
pub(crate) fn varint(out: &mut impl Out, mut n: u64) {
    while n >= 0x80 {
        out.byte((n as u8 & 0x7F) | 0x80);
        n >>= 7;
    }
    out.byte(n as u8);
}

/// A length-delimited field: its tag, the length as a varint, the bytes.
#[inline(always)]
pub(crate) fn field(out: &mut impl Out, tag: u8, data: &[u8]) {
    out.byte(tag);
    varint(out, data.len() as u64);
    out.put(data);
}

/// The size of `field(_, _, data)` for `n` bytes of data.
#[inline(always)]
pub(crate) fn field_len(n: usize) -> usize {
    let mut size = 2;
    let mut m = n >> 7;
    while m > 0 {
        size += 1;
        m >>= 7;
    }
    size + n
}

// ------------------------------------------------------------------------------------------------
// attributes

/// Adds the KeyValue in `b` to `out` as `attributes()` does; empty values are dropped.
#[inline]
fn key_value_into<'a, 'py>(py: Python<'py>, cache: &mut Cache<'a>, out: &Bound<'py, PyDict>, b: &'a [u8], depth: usize) -> R<()> {
    let mut r = Rd::new(b);
    let mut key: &[u8] = b"";
    let mut value: Option<&[u8]> = None;
    while r.more() {
        match r.tag()? {
            (1, 2) => key = r.ld()?,
            (2, 2) => {
                if value.is_some() {
                    return Err(Fail::Unmodelled); // a second value merges into the first
                }
                value = Some(r.ld()?)
            }
            (_, wt) => r.skip(wt)?,
        }
    }
    let key = cache.str(py, key)?;
    if let Some(v) = value {
        if let Some(v) = any_value(py, cache, v, depth)? {
            if unsafe { ffi::PyDict_SetItem(out.as_ptr(), key.as_ptr(), v.as_ptr()) } < 0 {
                return Err(PyErr::fetch(py).into());
            }
        }
    }
    Ok(())
}

fn attributes<'a, 'py>(py: Python<'py>, cache: &mut Cache<'a>, items: &[&'a [u8]], depth: usize) -> R<Bound<'py, PyDict>> {
    let out = presized(py, items.len())?;
    for kv in items {
        key_value_into(py, cache, &out, kv, depth)?;
    }
    Ok(out)
}

enum Kind<'a> {
    None,
    Str(&'a [u8]),
    Bool(u64),
    Int(u64),
    Double(u64),
    Array(&'a [u8]),
    KvList(&'a [u8]),
    Bytes(&'a [u8]),
}

fn any_value<'a, 'py>(py: Python<'py>, cache: &mut Cache<'a>, b: &'a [u8], depth: usize) -> R<Option<Bound<'py, PyAny>>> {
    let mut r = Rd::new(b);
    let mut kind = Kind::None; // a oneof: the last one read wins
    let mut nested = false; // an array or kvlist read: a second one may merge into it, which is not modelled
    while r.more() {
        kind = match r.tag()? {
            (1, 2) => Kind::Str(r.ld()?),
            (2, 0) => Kind::Bool(r.varint()?),
            (3, 0) => Kind::Int(r.varint()?),
            (4, 1) => Kind::Double(r.fixed(8)?),
            (f @ (5 | 6), 2) => {
                if nested {
                    return Err(Fail::Unmodelled);
                }
                nested = true;
                let b = r.ld()?;
                if f == 5 { Kind::Array(b) } else { Kind::KvList(b) }
            }
            (7, 2) => Kind::Bytes(r.ld()?),
            (8, 0) => return Err(Fail::Unmodelled), // string_value_strindex (profiles' string table): the Python reader's
            (_, wt) => {
                r.skip(wt)?;
                continue;
            }
        };
    }
    Ok(match kind {
        Kind::None => None,
        Kind::Str(s) => Some(cache.str(py, s)?),
        Kind::Bool(v) => Some(pyo3::types::PyBool::new(py, v != 0).to_owned().into_any()),
        Kind::Int(v) => Some((v as i64).into_pyobject(py).unwrap().into_any()),
        Kind::Double(v) => Some(f64::from_bits(v).into_pyobject(py).unwrap().into_any()),
        Kind::Bytes(s) => Some(bytes(py, s)),
        Kind::Array(a) => {
            if depth >= MAX_DEPTH {
                return Ok(None);
            }
            let mut out: Vec<Bound<'py, PyAny>> = Vec::new();
            let mut r = Rd::new(a);
            while r.more() {
                match r.tag()? {
                    (1, 2) => {
                        if let Some(v) = any_value(py, cache, r.ld()?, depth + 1)? {
                            out.push(v);
                        }
                    }
                    (_, wt) => r.skip(wt)?,
                }
            }
            Some(PyTuple::new(py, out)?.into_any())
        }
        Kind::KvList(a) => {
            if depth >= MAX_DEPTH {
                return Ok(None);
            }
            let out = PyDict::new(py);
            let mut r = Rd::new(a);
            while r.more() {
                match r.tag()? {
                    (1, 2) => key_value_into(py, cache, &out, r.ld()?, depth + 1)?,
                    (_, wt) => r.skip(wt)?,
                }
            }
            Some(out.into_any())
        }
    })
}

// ------------------------------------------------------------------------------------------------
// spans

fn span<'a, 'py>(
    py: Python<'py>,
    c: &Ctx,
    cache: &mut Cache<'a>,
    kvs: &mut Vec<&'a [u8]>,
    b: &'a [u8],
    resource: &Bound<'py, PyAny>,
    scope: &Bound<'py, PyAny>,
    origin: Option<&Bound<'py, PyAny>>,
    noise: Option<&[Vec<u8>]>,
) -> R<Bound<'py, PyAny>> {
    let mut r = Rd::new(b);
    let (mut trace_id, mut span_id, mut state, mut parent_id, mut name): (&[u8], &[u8], &[u8], &[u8], &[u8]) =
        (b"", b"", b"", b"", b"");
    let (mut kind, mut start, mut end, mut flags) = (0u64, 0u64, 0u64, 0u32);
    kvs.clear();
    let mut events: Vec<&[u8]> = Vec::new();
    let mut links: Vec<&[u8]> = Vec::new();
    let mut has_status = false;
    let (mut code, mut message): (u64, &[u8]) = (0, b"");
    while r.more() {
        match r.tag()? {
            (1, 2) => trace_id = r.ld()?,
            (2, 2) => span_id = r.ld()?,
            (3, 2) => state = r.ld()?,
            (4, 2) => parent_id = r.ld()?,
            (5, 2) => name = r.ld()?,
            (6, 0) => kind = r.varint()?,
            (7, 1) => start = r.fixed(8)?,
            (8, 1) => end = r.fixed(8)?,
            (9, 2) => kvs.push(r.ld()?),
            (11, 2) => events.push(r.ld()?),
            (13, 2) => links.push(r.ld()?),
            (15, 2) if has_status => return Err(Fail::Unmodelled), // upb merges two into one: its bytes differ
            (15, 2) => {
                has_status = true;
                let mut s = Rd::new(r.ld()?);
                while s.more() {
                    match s.tag()? {
                        (2, 2) => message = s.ld()?,
                        (3, 0) => code = s.varint()?,
                        (_, wt) => s.skip(wt)?,
                    }
                }
            }
            (16, 5) => flags = r.fixed(4)? as u32,
            (_, wt) => r.skip(wt)?,
        }
    }
    if let (Some(keys), Some(origin)) = (noise, origin) {
        let plain = state.is_empty() && events.is_empty() && links.is_empty();
        if plain && is_noise(trace_id, span_id, parent_id, name, flags, code, kvs, keys)? {
            let msg = kept_message(py, b, (flags != HAS_IS_REMOTE).then_some(HAS_IS_REMOTE), !has_status)?;
            let false_ = pyo3::types::PyBool::new(py, false).to_owned().into_any();
            let ids = (
                u128::from_be_bytes(trace_id.try_into().unwrap()),
                u64::from_be_bytes(span_id.try_into().unwrap()),
                u64::from_be_bytes(parent_id.try_into().unwrap()),
            );
            return tuple_of(py, &c.noise_cls, [
                ids.0.into_pyobject(py).unwrap().into_any(),
                u64_int(py, ids.1),
                u64_int(py, ids.2),
                false_,
                time_or_none(py, start),
                time_or_none(py, end),
                msg,
                origin.clone(),
            ]);
        }
    }
    let attrs = attributes(py, cache, kvs, 0)?;
    let n_attrs = kvs.len();
    let name = cache.str(py, name)?;
    let state = string(py, state)?;
    let message_str = string(py, message)?;
    let trace_int = id_int(py, trace_id, 16, "traceId")?;
    let span_int = id_int(py, span_id, 8, "spanId")?;
    let state_obj = if state.len()? > 0 {
        c.from_header.bind(py).call1((PyList::new(py, [state])?,))?
    } else {
        c.default_state.bind(py).clone()
    };
    let tf = c.flags[(flags & 0xFF) as usize].bind(py).clone();
    let false_ = pyo3::types::PyBool::new(py, false).to_owned().into_any();
    let true_ = pyo3::types::PyBool::new(py, true).to_owned().into_any();
    let context = span_context(py, c, [trace_int.clone(), span_int, false_, tf, state_obj, true_.clone()])?;
    let mut written = HAS_IS_REMOTE;
    let parent = if !parent_id.is_empty() {
        let pid = id_int(py, parent_id, 8, "parentSpanId")?;
        let remote = flags & REMOTE == REMOTE;
        if remote {
            written = REMOTE;
        }
        let rb = pyo3::types::PyBool::new(py, remote).to_owned().into_any();
        span_context(py, c, [trace_int, pid, rb, c.default_options.bind(py).clone(), c.default_state.bind(py).clone(), true_])?
    } else {
        py.None().into_bound(py)
    };
    let code = code as i32; // an open enum, read as int32
    let status = match code {
        1 => c.ok.bind(py).clone(),
        2 => {
            let msg = if message.is_empty() { py.None().into_bound(py) } else { message_str };
            c.status_cls.bind(py).call1((c.error.bind(py), msg))?
        }
        _ => c.unset.bind(py).clone(),
    };
    let kind = kind as i32;
    let kind = if (0..6).contains(&kind) { c.kinds[kind as usize].bind(py) } else { c.internal.bind(py) };
    let events_obj = if events.is_empty() {
        PyTuple::empty(py).into_any()
    } else {
        let mut out = Vec::with_capacity(events.len());
        for e in events {
            let mut r = Rd::new(e);
            let (mut t, mut n): (u64, &[u8]) = (0, b"");
            let mut kvs: Vec<&[u8]> = Vec::new();
            while r.more() {
                match r.tag()? {
                    (1, 1) => t = r.fixed(8)?,
                    (2, 2) => n = r.ld()?,
                    (3, 2) => kvs.push(r.ld()?),
                    (_, wt) => r.skip(wt)?,
                }
            }
            let a = attributes(py, cache, &kvs, 0)?;
            out.push(c.event_cls.bind(py).call1((cache.str(py, n)?, a, time_or_none(py, t)))?);
        }
        PyTuple::new(py, out)?.into_any()
    };
    let links_obj = if links.is_empty() {
        PyTuple::empty(py).into_any()
    } else {
        let mut out = Vec::with_capacity(links.len());
        for l in links {
            let mut r = Rd::new(l);
            let (mut tid, mut sid): (&[u8], &[u8]) = (b"", b"");
            let mut kvs: Vec<&[u8]> = Vec::new();
            while r.more() {
                match r.tag()? {
                    (1, 2) => tid = r.ld()?,
                    (2, 2) => sid = r.ld()?,
                    (3, 2) => {
                        string(py, r.ld()?)?;
                    }
                    (4, 2) => kvs.push(r.ld()?),
                    (_, wt) => r.skip(wt)?,
                }
            }
            let ctx_ = c.span_context.bind(py).call(
                (id_int(py, tid, 16, "link traceId")?, id_int(py, sid, 8, "link spanId")?),
                Some(c.remote_kw.bind(py)),
            )?;
            let a = attributes(py, cache, &kvs, 0)?;
            out.push(c.link_cls.bind(py).call1((ctx_, a))?);
        }
        PyTuple::new(py, out)?.into_any()
    };
    let keep = origin.is_some() && attrs.len() == n_attrs;
    let k = &c.k;
    let d = presized(py, 15)?;
    set(&d, &k[0], name)?;
    set(&d, &k[1], context)?;
    set(&d, &k[2], kind.clone())?;
    set(&d, &k[3], py.None().into_bound(py))?;
    set(&d, &k[4], scope.clone())?;
    set(&d, &k[5], parent)?;
    set(&d, &k[6], time_or_none(py, start))?;
    set(&d, &k[7], time_or_none(py, end))?;
    set(&d, &k[8], attrs.into_any())?;
    set(&d, &k[9], events_obj)?;
    set(&d, &k[10], links_obj)?;
    set(&d, &k[11], resource.clone())?;
    set(&d, &k[12], status)?;
    let obj = if keep {
        let msg = kept_message(py, b, (flags != written).then_some(written), !has_status)?;
        set(&d, &k[13], msg)?;
        set(&d, &k[14], origin.unwrap().clone())?;
        &c.message_span
    } else {
        &c.readable_span
    };
    with_dict(py, c, obj, &d)
}

/// A kept span's message: its bytes as they came, then the span flags as the SDK's encoder writes them (`written`,
/// when the span's own differ) and an empty status (when it has none): appended, so the last value wins.
fn kept_message<'py>(py: Python<'py>, b: &[u8], extra_flags: Option<u32>, extra_status: bool) -> R<Bound<'py, PyAny>> {
    let size = b.len() + if extra_flags.is_some() { 6 } else { 0 } + if extra_status { 2 } else { 0 };
    let msg = PyBytes::new_with(py, size, |buf| {
        buf[..b.len()].copy_from_slice(b);
        let mut p = b.len();
        if let Some(written) = extra_flags {
            buf[p..p + 2].copy_from_slice(b"\x85\x01");
            buf[p + 2..p + 6].copy_from_slice(&written.to_le_bytes());
            p += 6;
        }
        if extra_status {
            buf[p..p + 2].copy_from_slice(b"\x7a\x00");
        }
        Ok(())
    })?;
    Ok(msg.into_any())
}

/// `core/noise.py`'s rule on a span's bytes (rules 1-4; rule 5 is the replay's): noise when it is none of typed
/// (an attribute key among `keys`), a local root (no parent, or a remote one), ERROR, or named as a run; and only
/// where the full read would keep it as it came (valid ids, each attribute once with one scalar value), so
/// anything else, slower, is read whole: its facts and forwarded bytes are then those of the full path.
#[allow(clippy::too_many_arguments)]
pub(crate) fn is_noise(trace_id: &[u8], span_id: &[u8], parent_id: &[u8], name: &[u8], flags: u32, code: u64,
                       kvs: &[&[u8]], keys: &[Vec<u8>]) -> R<bool> {
    if trace_id.len() != 16 || span_id.len() != 8 || parent_id.len() != 8 || flags & REMOTE == REMOTE || code as i32 == 2 {
        return Ok(false); // a bad id (the full read says why), a local root (rule 2), ERROR (rule 3)
    }
    if trace_id.iter().all(|&x| x == 0) || span_id.iter().all(|&x| x == 0) || parent_id.iter().all(|&x| x == 0) {
        return Ok(false);
    }
    if name.starts_with(b"invoke_agent ") || name.starts_with(b"invoke_workflow ") {
        return Ok(false); // rule 4
    }
    let mut seen: Vec<&[u8]> = Vec::with_capacity(kvs.len());
    for kv in kvs {
        let mut r = Rd::new(kv);
        let (mut key, mut value): (&[u8], Option<&[u8]>) = (b"", None);
        while r.more() {
            match r.tag()? {
                (1, 2) => key = r.ld()?,
                (2, 2) if value.is_some() => return Ok(false),
                (2, 2) => value = Some(r.ld()?),
                (_, wt) => r.skip(wt)?,
            }
        }
        if keys.iter().any(|k| k.as_slice() == key) || seen.contains(&key) {
            return Ok(false); // typed (rule 1), or a key repeated: the full read does not keep the message
        }
        seen.push(key);
        let Some(v) = value else { return Ok(false) };
        let mut r = Rd::new(v);
        let mut fields = 0;
        while r.more() {
            fields += 1;
            match r.tag()? {
                (1, 2) | (7, 2) => {
                    r.ld()?;
                }
                (2, 0) | (3, 0) => {
                    r.varint()?;
                }
                (4, 1) => {
                    r.fixed(8)?;
                }
                _ => return Ok(false), // an array, a kvlist, anything else: the full read decides
            }
        }
        if fields != 1 {
            return Ok(false); // empty (dropped by the full read) or several (merged)
        }
    }
    Ok(true)
}

/// The length-delimited values of field `number` in the message `b`, in order.
pub(crate) fn repeated(b: &[u8], number: u64) -> R<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut r = Rd::new(b);
    while r.more() {
        match r.tag()? {
            (f, 2) if f == number => out.push(r.ld()?),
            (_, wt) => r.skip(wt)?,
        }
    }
    Ok(out)
}

/// A `ResourceSpans`' or `ScopeSpans`' head: its resource or scope (field 1, a message, None when absent) and its
/// schema URL (field 3). A second field 1 would merge into the first, which is not modelled.
pub(crate) fn head(b: &[u8]) -> R<(Option<&[u8]>, &[u8])> {
    let (mut message, mut schema): (Option<&[u8]>, &[u8]) = (None, b"");
    let mut r = Rd::new(b);
    while r.more() {
        match r.tag()? {
            (1, 2) if message.is_some() => return Err(Fail::Unmodelled),
            (1, 2) => message = Some(r.ld()?),
            (3, 2) => schema = r.ld()?,
            (_, wt) => r.skip(wt)?,
        }
    }
    Ok((message, schema))
}

fn request<'a, 'py>(
    py: Python<'py>,
    c: &Ctx,
    data: &'a [u8],
    keep: bool,
    noise: Option<&[Vec<u8>]>,
    spans: &Bound<'py, PyList>,
    problems: &Bound<'py, PyList>,
) -> R<()> {
    let mut cache = Cache::new();
    let mut scratch: Vec<&'a [u8]> = Vec::new();
    for entry in repeated(data, 1)? {
        let (res, res_schema) = head(entry)?;
        let kvs = match res {
            Some(rb) => repeated(rb, 1)?,
            None => Vec::new(),
        };
        let res_schema_str = string(py, res_schema)?;
        let resource = c.resource_cls.bind(py).call1((
            attributes(py, &mut cache, &kvs, 0)?,
            if res_schema.is_empty() { py.None().into_bound(py) } else { res_schema_str.clone() },
        ))?;
        let res_bytes = bytes(py, res.unwrap_or(b""));
        for se in repeated(entry, 2)? {
            let (sc, sc_schema) = head(se)?;
            let sc_schema_str = string(py, sc_schema)?;
            let scope = match sc {
                None => py.None().into_bound(py),
                Some(sb) => {
                    let (mut n, mut v): (&[u8], &[u8]) = (b"", b"");
                    let mut kvs: Vec<&[u8]> = Vec::new();
                    let mut s = Rd::new(sb);
                    while s.more() {
                        match s.tag()? {
                            (1, 2) => n = s.ld()?,
                            (2, 2) => v = s.ld()?,
                            (3, 2) => kvs.push(s.ld()?),
                            (_, wt) => s.skip(wt)?,
                        }
                    }
                    let a = attributes(py, &mut cache, &kvs, 0)?;
                    let none = py.None().into_bound(py);
                    c.scope_cls.bind(py).call1((
                        string(py, n)?,
                        if v.is_empty() { none.clone() } else { string(py, v)? },
                        if sc_schema.is_empty() { none.clone() } else { sc_schema_str.clone() },
                        if a.len() == 0 { none } else { a.into_any() },
                    ))?
                }
            };
            let origin = if keep {
                let o = new_object(py, c, &c.origin_cls)?;
                o.setattr("resource_key", (res_bytes.clone(), res_schema_str.clone()))?;
                let sk = match sc {
                    None => py.None().into_bound(py),
                    Some(sb) => bytes(py, sb),
                };
                o.setattr("scope_key", (sk, sc_schema_str.clone()))?;
                Some(o)
            } else {
                None
            };
            for item in repeated(se, 2)? {
                match span(py, c, &mut cache, &mut scratch, item, &resource, &scope, origin.as_ref(), noise) {
                    Ok(o) => spans.append(o)?,
                    Err(Fail::Problem(m)) => problems.append(m)?,
                    Err(Fail::Py(e))
                        if e.is_instance_of::<PyValueError>(py)
                            || e.is_instance_of::<PyTypeError>(py)
                            || e.is_instance_of::<PyOverflowError>(py) =>
                    {
                        problems.append(e.value(py).str()?)?
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// `(spans, problems)` of one serialized `ExportTraceServiceRequest` that upb accepts, as
/// `proto_spans.spans_of_request(parsed(data), keep=keep)` gives them; `None` where that reader must read it.
/// With `keep` and `noise` (the attribute keys that make a span typed, `core.noise.typed_keys`), a span that cannot
/// matter is a `messages.Noise` (its facts, kept message and origin) instead of a span.
#[pyfunction]
#[pyo3(signature = (data, keep = false, noise = None))]
fn spans_of_message<'py>(py: Python<'py>, data: &[u8], keep: bool, noise: Option<Vec<String>>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let c = ctx(py)?;
    let spans = PyList::empty(py);
    let problems = PyList::empty(py);
    let keys: Option<Vec<Vec<u8>>> = noise.map(|keys| keys.into_iter().map(String::into_bytes).collect());
    match request(py, c, data, keep, keys.as_deref(), &spans, &problems) {
        Ok(()) => Ok(Some(PyTuple::new(py, [spans.into_any(), problems.into_any()])?)),
        Err(Fail::Unmodelled) | Err(Fail::Problem(_)) => Ok(None),
        Err(Fail::Py(e)) => Err(e),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(spans_of_message, m)?)
}
