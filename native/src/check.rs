//! The one parse of a request in `serve`: OTLP protobuf bytes checked as upb's parse checks them, and their spans
//! counted, so the native reader can read them next without upb parsing them first (`payload.py`).
//!
//! The schema is the installed `opentelemetry-proto`'s, handed over from its descriptors (`proto_spans.py`), so a
//! field added there is checked here as upb checks it. What upb refuses is refused here: a tag longer than 5 bytes or
//! over 32 bits, field number 0, wire types 6 and 7, a varint longer than 10 bytes (a length: 5), a length or fixed value past the
//! end of its message, invalid UTF-8 in a proto3 `string`, an end-group tag that closes no group, a group left
//! open, nesting past upb's depth limit (100 messages or groups below the request). A known field with another
//! wire type than its own is an unknown field to upb, as here. `None` answers both "refused" and "not modelled"
//! (a packed or proto2-only field): the caller then asks upb, for its parse or its words.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// upb's default depth limit (`kUpb_WireFormat_DefaultDepthLimit`), which Python's `FromString` uses.
const DEPTH_LIMIT: u32 = 100;
const DENSE: usize = 32; // field numbers below this are looked up by index

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Varint,
    Fixed64,
    Fixed32,
    Bytes,
    Utf8,
    Message(usize),
    Unmodelled,
}

struct Message {
    dense: [Option<Kind>; DENSE],
    sparse: Vec<(u32, Kind)>,
}

impl Message {
    #[inline(always)]
    fn kind(&self, number: u32) -> Option<Kind> {
        if (number as usize) < DENSE {
            self.dense[number as usize]
        } else {
            self.sparse.iter().find(|(n, _)| *n == number).map(|(_, k)| *k)
        }
    }
}

struct Refused; // or not modelled: upb decides

type Checked<T> = Result<T, Refused>;

struct Reader<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn more(&self) -> bool {
        self.p < self.b.len()
    }
    #[inline(always)]
    fn varint(&mut self) -> Checked<u64> {
        let mut r: u64 = 0;
        for i in 0..10 {
            let Some(&c) = self.b.get(self.p) else { return Err(Refused) };
            self.p += 1;
            r |= ((c & 0x7f) as u64).wrapping_shl(7 * i);
            if c < 0x80 {
                return Ok(r);
            }
        }
        Err(Refused)
    }
    /// A tag as upb reads it: at most 5 bytes, at most 32 bits.
    #[inline(always)]
    fn tag(&mut self) -> Checked<(u32, u8)> {
        let start = self.p;
        let t = self.varint()?;
        if self.p - start > 5 || t > u32::MAX as u64 {
            return Err(Refused);
        }
        Ok(((t >> 3) as u32, (t & 7) as u8))
    }
    /// A length-delimited value as upb reads it: its length at most 5 bytes, below 2**31, within the message.
    #[inline(always)]
    fn delimited(&mut self) -> Checked<&'a [u8]> {
        let start = self.p;
        let n = self.varint()?;
        if self.p - start > 5 || n >= i32::MAX as u64 || n > (self.b.len() - self.p) as u64 {
            return Err(Refused);
        }
        let s = &self.b[self.p..self.p + n as usize];
        self.p += n as usize;
        Ok(s)
    }
    #[inline(always)]
    fn fixed(&mut self, n: usize) -> Checked<()> {
        if self.b.len() - self.p < n {
            return Err(Refused);
        }
        self.p += n;
        Ok(())
    }
}

/// The checked schema: messages by index (0: the request), and the field whose messages are counted.
#[pyclass(frozen, module = "otel_agent_eval.otlp._native")]
pub struct SpanCounter {
    messages: Vec<Message>,
    counted: (usize, u32),
}

/// Field kinds as `proto_spans._counter_schema` hands them over.
fn kind_of(code: u8, sub: usize, messages: usize) -> PyResult<Kind> {
    Ok(match code {
        0 => Kind::Varint,
        1 => Kind::Fixed64,
        5 => Kind::Fixed32,
        2 => Kind::Bytes,
        9 => Kind::Utf8,
        11 if sub < messages => Kind::Message(sub),
        99 => Kind::Unmodelled,
        _ => return Err(PyValueError::new_err(format!("field kind {code} (sub-message {sub}) is not one SpanCounter knows"))),
    })
}

impl SpanCounter {
    /// The fields of message `m` up to its end, or up to the end-group tag of `group`.
    fn message(&self, r: &mut Reader<'_>, m: Option<usize>, depth: u32, group: Option<u32>, count: &mut usize) -> Checked<()> {
        while r.more() {
            let (number, wt) = r.tag()?;
            if wt == 4 {
                return if group == Some(number) { Ok(()) } else { Err(Refused) };
            }
            if number == 0 {
                return Err(Refused);
            }
            let kind = m.and_then(|m| self.messages[m].kind(number));
            match (kind, wt) {
                (Some(Kind::Message(sub)), 2) => {
                    let b = r.delimited()?;
                    if depth == 0 {
                        return Err(Refused);
                    }
                    self.message(&mut Reader { b, p: 0 }, Some(sub), depth - 1, None, count)?;
                    if m == Some(self.counted.0) && number == self.counted.1 {
                        *count += 1;
                    }
                }
                (Some(Kind::Utf8), 2) => {
                    if std::str::from_utf8(r.delimited()?).is_err() {
                        return Err(Refused);
                    }
                }
                (Some(Kind::Unmodelled), _) => return Err(Refused),
                (_, 0) => {
                    r.varint()?;
                }
                (_, 1) => r.fixed(8)?,
                (_, 2) => {
                    r.delimited()?;
                }
                (_, 5) => r.fixed(4)?,
                (_, 3) => {
                    // a group (unknown here: no OTLP field is one), read to its end-group tag
                    if depth == 0 {
                        return Err(Refused);
                    }
                    self.message(r, None, depth - 1, Some(number), count)?;
                }
                _ => return Err(Refused), // wire types 4 (handled above), 6, 7
            }
        }
        if group.is_some() {
            return Err(Refused); // the message ended inside a group
        }
        Ok(())
    }
}

#[pymethods]
impl SpanCounter {
    /// `messages[i]`: message i's known fields as `(number, kind, sub-message index)`; `counted`: `(message index,
    /// field number)` whose values are counted (ScopeSpans.spans).
    #[new]
    fn new(messages: Vec<Vec<(u32, u8, usize)>>, counted: (usize, u32)) -> PyResult<Self> {
        let n = messages.len();
        let mut out = Vec::with_capacity(n);
        for fields in messages {
            let mut message = Message { dense: [None; DENSE], sparse: Vec::new() };
            for (number, code, sub) in fields {
                let kind = kind_of(code, sub, n)?;
                if (number as usize) < DENSE {
                    message.dense[number as usize] = Some(kind);
                } else {
                    message.sparse.push((number, kind));
                }
            }
            out.push(message);
        }
        if counted.0 >= n {
            return Err(PyValueError::new_err("the counted field's message is not in the schema"));
        }
        Ok(SpanCounter { messages: out, counted })
    }

    /// The spans of a serialized `ExportTraceServiceRequest` as upb counts them once it has parsed the bytes, or
    /// None where upb refuses the bytes (or they hold what is not modelled here). Runs without the GIL.
    fn __call__(&self, py: Python<'_>, data: &[u8]) -> Option<usize> {
        py.detach(|| {
            let mut count = 0;
            self.message(&mut Reader { b: data, p: 0 }, Some(0), DEPTH_LIMIT, None, &mut count).ok().map(|_| count)
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SpanCounter>()
}
