//! The kubelet's registration client names the socket's path as the HTTP/2 `:authority`, and
//! h2 (tonic's HTTP/2) refuses such a request with RST_STREAM PROTOCOL_ERROR: "malformed
//! authority ... invalid uri character" (hyperium/h2#487, open). The plugin watcher dials the
//! bare path with `grpc.DialContext` (pkg/kubelet/pluginmanager/operationexecutor, still in
//! Kubernetes 1.37), so grpc-go takes the path as the authority; the DRA socket is dialed as
//! `unix:<path>`, which grpc-go sends as `localhost`. Seen on the lab's kubelet: "RegisterPlugin
//! error -- failed to get plugin info using RPC GetInfo ... stream terminated by RST_STREAM with
//! error code: PROTOCOL_ERROR", and the driver never registered.
//!
//! So tonic reads the registration socket's connections through [`AuthorityRewriting`], which
//! rewrites the value of every `:authority` field in the client's header blocks to `localhost`
//! and passes everything else as it is. The rewrite walks HPACK representations by their lengths alone (no Huffman
//! decoding) and keeps each representation's kind: a field the client added to the dynamic table
//! is added to the server's too, at the same position, so later indexed references still agree
//! (entries are found by position; the server's table holds no more bytes than the client's, so
//! it never evicts an entry the client still refers to).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// `:authority`'s index in HPACK's static table (RFC 7541, appendix A).
const AUTHORITY: u64 = 1;
const LOCALHOST: &[u8] = b"localhost";

/// A registration connection as tonic reads it: the client's bytes with every `:authority`
/// value rewritten, in the same task (a relay task in between cost the kubelet's 1 s GetInfo
/// deadline two more wake-ups on a loaded node). Writes pass through.
pub struct AuthorityRewriting {
    inner: UnixStream,
    /// Bytes read from the client and not yet rewritten (an incomplete frame or block).
    raw: Vec<u8>,
    /// Rewritten bytes not yet handed to tonic, from `ready_at` on.
    ready: Vec<u8>,
    ready_at: usize,
    preface_seen: bool,
    /// A header block being gathered: its stream, its HEADERS frame's flags, priority, block.
    pending: Option<(u32, u8, Vec<u8>, Vec<u8>)>,
}

impl AuthorityRewriting {
    pub fn new(inner: UnixStream) -> AuthorityRewriting {
        AuthorityRewriting {
            inner,
            raw: Vec::new(),
            ready: Vec::new(),
            ready_at: 0,
            preface_seen: false,
            pending: None,
        }
    }

    /// Moves every complete unit of `raw` (the preface, a frame, a whole header block) to
    /// `ready`, rewritten.
    fn process(&mut self) -> io::Result<()> {
        if !self.preface_seen {
            if self.raw.len() < PREFACE.len() {
                return Ok(());
            }
            self.preface_seen = true;
            self.ready.extend(self.raw.drain(..PREFACE.len()));
        }
        while self.raw.len() >= 9 {
            let len = u32::from_be_bytes([0, self.raw[0], self.raw[1], self.raw[2]]) as usize;
            if self.raw.len() < 9 + len {
                return Ok(());
            }
            let frame: Vec<u8> = self.raw.drain(..9 + len).collect();
            self.frame(&frame)?;
        }
        Ok(())
    }

    fn frame(&mut self, frame: &[u8]) -> io::Result<()> {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[9..];
        match (kind, self.pending.as_mut()) {
            (HEADERS, None) => {
                let (priority, block) = split_headers(flags, payload)?;
                self.pending = Some((stream, flags, priority, block.to_vec()));
            }
            (CONTINUATION, Some((_, _, _, block))) => block.extend_from_slice(payload),
            _ => {
                self.ready.extend_from_slice(frame);
                return Ok(());
            }
        }
        if flags & END_HEADERS != 0 {
            let (stream, first, priority, block) = self.pending.take().expect("a block is pending");
            let rewritten = headers_frame(first, stream, &priority, &rewrite_block(&block)?);
            self.ready.extend_from_slice(&rewritten);
        }
        Ok(())
    }
}

impl AsyncRead for AuthorityRewriting {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_at);
                buf.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                if this.ready_at == this.ready.len() {
                    this.ready.clear();
                    this.ready_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    // The client closed: hand on what is left as it is, then the end.
                    this.ready.append(&mut this.raw);
                    if this.ready.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(Ok(())) => {
                    this.raw.extend_from_slice(read.filled());
                    this.process()?;
                }
            }
        }
    }
}

impl AsyncWrite for AuthorityRewriting {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for AuthorityRewriting {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

/// A HEADERS payload's priority fields and header block fragment, its padding dropped.
fn split_headers(flags: u8, payload: &[u8]) -> io::Result<(Vec<u8>, &[u8])> {
    let mut body = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = *body
            .first()
            .ok_or_else(|| bad("HEADERS without its pad length"))? as usize;
        body = &body[1..];
    }
    let priority_len = if flags & PRIORITY != 0 { 5 } else { 0 };
    if body.len() < priority_len + pad {
        return Err(bad("HEADERS shorter than its padding and priority"));
    }
    let priority = body[..priority_len].to_vec();
    Ok((priority, &body[priority_len..body.len() - pad]))
}

/// One HEADERS frame carrying the whole block (END_STREAM kept, END_HEADERS set, no padding).
fn headers_frame(flags: u8, stream: u32, priority: &[u8], block: &[u8]) -> Vec<u8> {
    let flags = (flags & 0x1) | END_HEADERS | if priority.is_empty() { 0 } else { PRIORITY };
    let len = (priority.len() + block.len()) as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[HEADERS, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(priority);
    out.extend_from_slice(block);
    out
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// An HPACK integer with an N-bit prefix at `at` (RFC 7541, 5.1): its value and end.
fn integer(block: &[u8], at: usize, prefix_bits: u32) -> io::Result<(u64, usize)> {
    let max = (1u64 << prefix_bits) - 1;
    let first = *block
        .get(at)
        .ok_or_else(|| bad("truncated HPACK integer"))? as u64
        & max;
    if first < max {
        return Ok((first, at + 1));
    }
    let (mut value, mut shift, mut i) = (max, 0u32, at + 1);
    loop {
        let b = *block.get(i).ok_or_else(|| bad("truncated HPACK integer"))? as u64;
        value += (b & 0x7f) << shift;
        i += 1;
        if b & 0x80 == 0 || shift > 56 {
            return Ok((value, i));
        }
        shift += 7;
    }
}

/// The end of the HPACK string literal at `at` (5.2).
fn string_end(block: &[u8], at: usize) -> io::Result<usize> {
    let (len, start) = integer(block, at, 7)?;
    let end = start + len as usize;
    if end > block.len() {
        return Err(bad("truncated HPACK string"));
    }
    Ok(end)
}

/// The header block with every literal `:authority` value replaced by `localhost`.
pub fn rewrite_block(block: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(block.len());
    let mut at = 0;
    while at < block.len() {
        let b = block[at];
        let name_bits = match b {
            _ if b & 0x80 != 0 => None,       // indexed field (6.1)
            _ if b & 0xc0 == 0x40 => Some(6), // literal, incremental indexing (6.2.1)
            _ if b & 0xe0 == 0x20 => None,    // dynamic table size update (6.3)
            _ => Some(4), // literal without indexing / never indexed (6.2.2, 6.2.3)
        };
        let Some(bits) = name_bits else {
            let prefix = if b & 0x80 != 0 { 7 } else { 5 };
            let (_, end) = integer(block, at, prefix)?;
            out.extend_from_slice(&block[at..end]);
            at = end;
            continue;
        };
        let (name_index, mut value_at) = integer(block, at, bits)?;
        if name_index == 0 {
            value_at = string_end(block, value_at)?;
        }
        let end = string_end(block, value_at)?;
        out.extend_from_slice(&block[at..value_at]);
        if name_index == AUTHORITY
            || (name_index == 0 && literal_name(block, at + 1)? == b":authority")
        {
            out.push(LOCALHOST.len() as u8); // not Huffman-coded, length < 127
            out.extend_from_slice(LOCALHOST);
        } else {
            out.extend_from_slice(&block[value_at..end]);
        }
        at = end;
    }
    Ok(out)
}

/// A new name's raw bytes when not Huffman-coded (grpc-go indexes `:authority`'s name, so a
/// Huffman-coded new name is never it in practice; it is compared as it stands).
fn literal_name(block: &[u8], at: usize) -> io::Result<&[u8]> {
    let (_, start) = integer(block, at, 7)?;
    Ok(&block[start..string_end(block, at)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What grpc-go's HPACK encoder writes for the kubelet's first request: `:method POST`
    /// (indexed, 3), `:scheme http` (indexed, 6), `:path` (literal with incremental indexing,
    /// indexed name 4), `:authority` with the socket's path (incremental indexing, name 1),
    /// `content-type` (a new name, without indexing), then an indexed reference to the dynamic
    /// table's newest entry (62).
    fn kubelet_block(authority: &[u8]) -> Vec<u8> {
        let mut b = vec![0x83, 0x86];
        let path = b"/pluginregistration.Registration/GetInfo";
        b.push(0x44);
        b.push(path.len() as u8);
        b.extend_from_slice(path);
        b.push(0x41);
        b.push(authority.len() as u8);
        b.extend_from_slice(authority);
        b.push(0x00);
        b.push(12);
        b.extend_from_slice(b"content-type");
        b.push(16);
        b.extend_from_slice(b"application/grpc");
        b.push(0x80 | 62);
        b
    }

    #[test]
    fn the_socket_path_as_authority_becomes_localhost_and_nothing_else_changes() {
        let sock = b"/var/lib/kubelet/plugins_registry/rdma-ns.io-reg.sock";
        assert_eq!(
            rewrite_block(&kubelet_block(sock)).unwrap(),
            kubelet_block(b"localhost")
        );
        // Its presence twin: a block with no :authority passes through unchanged.
        let plain = [0x83, 0x86, 0x84, 0x80 | 62];
        assert_eq!(rewrite_block(&plain).unwrap(), plain);
    }

    #[test]
    fn a_new_name_authority_and_long_integers_are_walked_too() {
        // `:authority` as a new name, never indexed (0x10), then a literal whose indexed name
        // needs a multi-byte integer (index 62 with a 4-bit prefix: 15 + 47).
        let mut b = vec![0x10, 10];
        b.extend_from_slice(b":authority");
        b.push(4);
        b.extend_from_slice(b"/x/y");
        b.extend_from_slice(&[0x0f, 47, 1, b'v']);
        let mut want = vec![0x10, 10];
        want.extend_from_slice(b":authority");
        want.push(9);
        want.extend_from_slice(b"localhost");
        want.extend_from_slice(&[0x0f, 47, 1, b'v']);
        assert_eq!(rewrite_block(&b).unwrap(), want);
        assert!(
            rewrite_block(&[0x41, 20, b'x']).is_err(),
            "a truncated string is refused"
        );
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A client's bytes arriving one at a time, with the header block split over HEADERS and
    /// CONTINUATION: tonic reads the preface and the other frames as sent, and the block as one
    /// HEADERS frame, rewritten, that keeps END_STREAM.
    #[tokio::test]
    async fn frames_split_across_reads_come_out_whole_and_rewritten() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let block = kubelet_block(b"/run/x.sock");
        let (first, rest) = block.split_at(10);
        let mut sent = PREFACE.to_vec();
        sent.extend(frame(0x4, 0, 0, &[]));
        sent.extend(frame(HEADERS, 0x1, 1, first));
        sent.extend(frame(CONTINUATION, END_HEADERS, 1, rest));
        sent.extend(frame(0x0, 0x1, 3, &[0, 0, 0, 0, 0]));
        let mut want = PREFACE.to_vec();
        want.extend(frame(0x4, 0, 0, &[]));
        want.extend(frame(
            HEADERS,
            0x1 | END_HEADERS,
            1,
            &kubelet_block(b"localhost"),
        ));
        want.extend(frame(0x0, 0x1, 3, &[0, 0, 0, 0, 0]));

        let (mut client, server) = UnixStream::pair().unwrap();
        let writer = tokio::spawn(async move {
            for b in sent {
                client.write_all(&[b]).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut got = Vec::new();
        AuthorityRewriting::new(server)
            .read_to_end(&mut got)
            .await
            .unwrap();
        writer.await.unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn padding_and_priority_are_taken_off_a_headers_frame() {
        let payload = [2, 0, 0, 0, 3, 16, 0x83, 0x86, 0, 0];
        let (priority, block) = split_headers(PADDED | PRIORITY, &payload).unwrap();
        assert_eq!((priority, block), (vec![0, 0, 0, 3, 16], &[0x83, 0x86][..]));
        let frame = headers_frame(PADDED | PRIORITY | 0x1, 3, &[0, 0, 0, 3, 16], &[0x83]);
        assert_eq!(
            frame,
            [
                0,
                0,
                6,
                HEADERS,
                0x1 | END_HEADERS | PRIORITY,
                0,
                0,
                0,
                3,
                0,
                0,
                0,
                3,
                16,
                0x83
            ]
        );
    }
}
