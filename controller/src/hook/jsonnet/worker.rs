//! The Jsonnet worker process (`kmeta jsonnet-worker`): reads evaluation requests from stdin
//! and writes answers to stdout, one at a time, keeping each program version it was sent
//! loaded. It has no other input: the controller ([`super::pool`]) kills it when an evaluation
//! runs past its timeout or its memory past the limit, and starts another.
//!
//! Frames: a 4-byte big-endian length, then that many bytes of JSON ([`Request`], [`Answer`]).

use std::io::{Read, Write};

use rsjsonnet_lang::arena::Arena;
use serde::{Deserialize, Serialize};

use super::eval::{Evaluator, Sources};

/// The largest frame either side accepts (a request carries the parent and its children).
pub const MAX_FRAME: usize = 512 * 1024 * 1024;

/// One evaluation.
#[derive(Serialize, Deserialize, Debug)]
pub struct Request {
    /// The program version ([`Sources::digest`]).
    pub digest: String,
    /// The program, when this worker has not been sent this version yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Sources>,
    /// The hook request, as JSON text.
    pub request: String,
    /// The largest answer allowed, in bytes.
    pub max_output: usize,
}

/// The worker's answer to one [`Request`].
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Answer {
    /// The hook's response body.
    Ok(String),
    /// Why the program failed (syntax, runtime, output size).
    Failed(String),
    /// The worker was not sent this version's sources.
    Unknown,
}

/// Why the worker's stream broke.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Reading or writing the pipe failed.
    #[error("jsonnet worker pipe: {0}")]
    Io(#[from] std::io::Error),
    /// A frame was not the JSON expected.
    #[error("jsonnet worker frame: {0}")]
    Json(#[from] serde_json::Error),
    /// A frame announced more than [`MAX_FRAME`] bytes.
    #[error("jsonnet worker frame of {0} bytes exceeds {MAX_FRAME}")]
    TooLarge(usize),
}

/// Reads one frame; `None` at a clean end of input.
fn read_frame(input: &mut impl Read) -> Result<Option<Vec<u8>>, FrameError> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut buf = vec![0u8; len];
    input.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// `body` as a frame: its length, then itself.
pub fn frame(body: &[u8]) -> Result<Vec<u8>, FrameError> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|l| *l as usize <= MAX_FRAME)
        .ok_or(FrameError::TooLarge(body.len()))?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// Serves requests from `input` until it ends.
pub fn serve(input: &mut impl Read, output: &mut impl Write) -> Result<(), FrameError> {
    let arena = Arena::new();
    let mut ev = Evaluator::new(&arena);
    while let Some(buf) = read_frame(input)? {
        let req: Request = serde_json::from_slice(&buf)?;
        drop(buf);
        let answer = answer(&mut ev, req);
        output.write_all(&frame(&serde_json::to_vec(&answer)?)?)?;
        output.flush()?;
    }
    Ok(())
}

fn answer(ev: &mut Evaluator<'_>, req: Request) -> Answer {
    if let Some(sources) = req.sources
        && !ev.has(&req.digest)
        && let Err(e) = ev.load(&req.digest, sources)
    {
        return Answer::Failed(e.to_string());
    }
    if !ev.has(&req.digest) {
        return Answer::Unknown;
    }
    match ev.evaluate(&req.digest, &req.request, req.max_output) {
        Ok(out) => Answer::Ok(out),
        Err(e) => Answer::Failed(e.to_string()),
    }
}

/// The worker process's body: serves stdin until it closes. Its exit code is 0 then, 1 when
/// the stream broke.
pub fn main() -> i32 {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut input = std::io::BufReader::new(stdin.lock());
    let mut output = std::io::BufWriter::new(stdout.lock());
    match serve(&mut input, &mut output) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("kmeta jsonnet-worker: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_that_fails_to_load_is_not_kept() {
        let arena = Arena::new();
        let mut ev = Evaluator::new(&arena);
        let broken = Sources::inline("function(request) {");
        let req = || Request {
            digest: "d".into(),
            sources: Some(broken.clone()),
            request: "{}".into(),
            max_output: 100,
        };
        for _ in 0..2 {
            let a = answer(&mut ev, req());
            assert!(
                matches!(&a, Answer::Failed(m) if m.starts_with("source:1:")),
                "{a:?}"
            );
        }
        assert!(!ev.has("d"));
    }

    #[test]
    fn a_worker_loads_a_version_once_and_answers_each_request() -> Result<(), FrameError> {
        let sources = Sources::inline("function(request) {n: request.n + 1}");
        let digest = sources.digest();
        let reqs = [
            Request {
                digest: digest.clone(),
                sources: Some(sources),
                request: r#"{"n": 1}"#.into(),
                max_output: 1000,
            },
            Request {
                digest: digest.clone(),
                sources: None,
                request: r#"{"n": 2}"#.into(),
                max_output: 1000,
            },
            Request {
                digest: "other".into(),
                sources: None,
                request: "{}".into(),
                max_output: 1000,
            },
        ];
        let mut input = Vec::new();
        for r in &reqs {
            input.extend(frame(&serde_json::to_vec(r)?)?);
        }
        let mut output = Vec::new();
        serve(&mut input.as_slice(), &mut output)?;
        let mut answers = Vec::new();
        let mut rest = output.as_slice();
        while let Some(f) = read_frame(&mut rest)? {
            answers.push(serde_json::from_slice::<Answer>(&f)?);
        }
        assert_eq!(
            answers,
            [
                Answer::Ok("{\n   \"n\": 2\n}\n".into()),
                Answer::Ok("{\n   \"n\": 3\n}\n".into()),
                Answer::Unknown,
            ]
        );
        Ok(())
    }
}
