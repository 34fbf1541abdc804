//! Decoding: frames to messages, total and bounded.

use super::*;

/// Why [`decode`] rejects a frame. Offsets are byte positions in the frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes break the format every Creek encoding shares: the frame
    /// ends early, a varint is malformed, a length claims more than the
    /// frame holds, or bytes follow the message.
    #[error(transparent)]
    Format(#[from] creek_types::DecodeError),
    /// The frame is of another version of the format.
    #[error("unsupported wire version {got} (this node speaks version {supported})")]
    UnsupportedVersion {
        /// The frame's version byte.
        got: u8,
        /// The version this node speaks, [`WIRE_VERSION`].
        supported: u8,
    },
    /// The message-kind byte names no message.
    #[error("unknown message kind 0x{tag:02x} at byte {offset}")]
    UnknownKind {
        /// The kind byte.
        tag: u8,
        /// Where it is.
        offset: usize,
    },
    /// A replica id does not fit in 16 bits.
    #[error("replica id {value} at byte {offset} does not fit in 16 bits")]
    ReplicaIdOutOfRange {
        /// The value.
        value: u64,
        /// Where it starts.
        offset: usize,
    },
    /// An id has `seq == 0`.
    #[error("seq 0 at byte {offset} is not a valid seq")]
    ZeroSeq {
        /// Where the seq starts.
        offset: usize,
    },
    /// A frame, count or length exceeds a [`Limits`] value.
    #[error("{len} at byte {offset} exceeds {limit} = {max}")]
    LimitExceeded {
        /// The limit.
        limit: Limit,
        /// The frame length, or the declared count or length.
        len: u64,
        /// The limit's value.
        max: usize,
        /// Where the count or length starts (0 for the frame length).
        offset: usize,
    },
    /// A procedure name is not UTF-8.
    #[error("procedure name at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Where the name's bytes start.
        offset: usize,
    },
    /// An op's flags set bits that mean nothing.
    #[error("op flags 0x{flags:02x} at byte {offset} set unknown bits")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
        /// Where it is.
        offset: usize,
    },
    /// An op is strong without a causal context, or weak with one.
    #[error("op flags at byte {offset}: {}", mismatch(*.strong))]
    StrongContextMismatch {
        /// The op's `strong` flag.
        strong: bool,
        /// Where the flags byte is.
        offset: usize,
    },
    /// A causal context's exception seq exceeds `u64::MAX`.
    #[error("exception seq gap at byte {offset} overflows 64 bits")]
    SeqOverflow {
        /// Where the gap starts.
        offset: usize,
    },
    /// A hello's state byte means nothing.
    #[error("member state {state} at byte {offset} is not 0, 1 or 2")]
    UnknownMemberState {
        /// The byte.
        state: u8,
        /// Where it is.
        offset: usize,
    },
    /// A hello's directory does not decode.
    #[error("directory at byte {offset}: {why}")]
    MalformedDirectory {
        /// Where its length starts.
        offset: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A flag byte is neither 0 nor 1.
    #[error("flag {value} at byte {offset} is not 0 or 1")]
    NotABool {
        /// The byte.
        value: u8,
        /// Where it is.
        offset: usize,
    },
}

/// Decodes one frame. Byte strings in the message (arguments, Raft payloads)
/// are copied out of `frame`; see [`decode_bytes`] to share them instead.
///
/// Never panics; allocates memory proportional to `frame.len()`.
pub fn decode(frame: &[u8], limits: &Limits) -> Result<PeerMessage, DecodeError> {
    Reader {
        r: creek_types::Reader::new(frame),
        limits,
    }
    .frame()
}

/// Decodes one frame like [`decode`], but the message's byte strings
/// (arguments, Raft payloads) are slices of `frame`, without copies.
///
/// Each such slice keeps the whole frame's buffer alive; a receiver that
/// keeps a few small ops of a large frame for long may prefer [`decode`].
pub fn decode_bytes(frame: &Bytes, limits: &Limits) -> Result<PeerMessage, DecodeError> {
    Reader {
        r: creek_types::Reader::shared(frame),
        limits,
    }
    .frame()
}

/// Decodes one op encoded by [`encode_op`]; the whole input must be that
/// op. Byte strings of the op share `bytes`. Never panics.
pub fn decode_op(bytes: &Bytes, limits: &Limits) -> Result<Op, DecodeError> {
    let mut reader = Reader {
        r: creek_types::Reader::shared(bytes),
        limits,
    };
    let op = reader.op()?;
    reader.finish()?;
    Ok(op)
}

/// The shared bounded reader (every access bounds-checked) with the
/// frame's [`Limits`] on counts and lengths.
struct Reader<'a> {
    r: creek_types::Reader<'a>,
    limits: &'a Limits,
}

impl<'a> std::ops::Deref for Reader<'a> {
    type Target = creek_types::Reader<'a>;

    fn deref(&self) -> &Self::Target {
        &self.r
    }
}

impl std::ops::DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.r
    }
}

impl Reader<'_> {
    fn replica(&mut self) -> Result<ReplicaId, DecodeError> {
        let offset = self.pos();
        let value = self.varint()?;
        u16::try_from(value)
            .map(ReplicaId)
            .map_err(|_| DecodeError::ReplicaIdOutOfRange { value, offset })
    }

    fn id(&mut self) -> Result<OpId, DecodeError> {
        let origin = self.replica()?;
        let offset = self.pos();
        let seq = self.varint()?;
        if seq == 0 {
            return Err(DecodeError::ZeroSeq { offset });
        }
        Ok(OpId { origin, seq })
    }

    /// A count or byte length: at most `limit` (if any), and at most what
    /// the rest of the frame can hold given that each unit takes at least
    /// `unit_bytes_min` bytes. So whatever is reserved for the units is
    /// proportional to the frame.
    fn length(
        &mut self,
        limit: Option<Limit>,
        unit_bytes_min: usize,
    ) -> Result<usize, DecodeError> {
        let offset = self.pos();
        let len = self.varint()?;
        if let Some(limit) = limit {
            let max = self.limits.get(limit);
            if len > max as u64 {
                return Err(DecodeError::LimitExceeded {
                    limit,
                    len,
                    max,
                    offset,
                });
            }
        }
        Ok(self.bound(len, offset, unit_bytes_min)?)
    }

    /// A length-prefixed byte string, shared with the frame if possible.
    fn bytes(&mut self, limit: Limit) -> Result<Bytes, DecodeError> {
        self.bytes_within(Some(limit))
    }

    /// A length-prefixed byte string under `limit`, or under the frame's
    /// length only (`None`); shared with the frame if possible.
    fn bytes_within(&mut self, limit: Option<Limit>) -> Result<Bytes, DecodeError> {
        let len = self.length(limit, 1)?;
        Ok(self.bytes_of(len)?)
    }

    fn hello(&mut self, kind: u8) -> Result<Hello, DecodeError> {
        let nonce = self.u64le()?;
        let offset = self.pos();
        let state = match self.byte()? {
            0 => MemberState::Joining,
            1 => MemberState::Member,
            2 => MemberState::Lost,
            state => return Err(DecodeError::UnknownMemberState { state, offset }),
        };
        // Each founder takes at least 9 bytes (a varint and a u64le).
        let count = self.length(Some(Limit::IdsPerMessage), 9)?;
        let founders = (0..count)
            .map(|_| Ok((self.replica()?, self.u64le()?)))
            .collect::<Result<_, DecodeError>>()?;
        let term = self.varint()?;
        let peer_seq = self.varint()?;
        let reserved = self.varint()?;
        let peer_reserved = self.varint()?;
        let floor = self.varint()?;
        let last_index = self.varint()?;
        let mut replicas = || {
            let count = self.length(Some(Limit::IdsPerMessage), 1)?;
            (0..count)
                .map(|_| self.replica())
                .collect::<Result<Vec<_>, DecodeError>>()
        };
        let group = replicas()?;
        let voters = replicas()?;
        let conf_index = self.varint()?;
        let offset = self.pos();
        let directory = crate::checkpoint::decode_directory(&self.bytes_within(None)?)
            .map_err(|e| DecodeError::MalformedDirectory { offset, why: e.0 })?;
        Ok(Hello {
            nonce,
            state,
            founders,
            reply: kind == KIND_HELLO_REPLY,
            term,
            peer_seq,
            reserved,
            peer_reserved,
            floor,
            last_index,
            group,
            voters,
            conf_index,
            directory,
        })
    }

    fn snapshot_chunk(&mut self) -> Result<SnapshotChunk, DecodeError> {
        let transfer = self.varint()?;
        let index = self.varint()?;
        let term = self.varint()?;
        let total_len = self.varint()?;
        let checksum = self.u32le()?;
        let offset = self.varint()?;
        // Bounded by the frame (checked against `frame_bytes_max` above).
        let data = self.bytes_within(None)?;
        Ok(SnapshotChunk {
            transfer,
            index,
            term,
            total_len,
            checksum,
            offset,
            data,
        })
    }

    fn frame(mut self) -> Result<PeerMessage, DecodeError> {
        let frame_len = self.remaining();
        let version = self.byte()?;
        if version != WIRE_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                got: version,
                supported: WIRE_VERSION,
            });
        }
        if frame_len > self.limits.frame_bytes_max {
            return Err(DecodeError::LimitExceeded {
                limit: Limit::FrameBytes,
                len: frame_len as u64,
                max: self.limits.frame_bytes_max,
                offset: 0,
            });
        }
        let kind_offset = self.pos();
        let msg = match self.byte()? {
            KIND_OPS => PeerMessage::Gossip(GossipMessage::Ops(self.ops()?)),
            KIND_DIGEST => PeerMessage::Gossip(GossipMessage::Digest {
                delivered: self.digest()?,
            }),
            KIND_PULL => PeerMessage::Gossip(GossipMessage::Pull { ids: self.ids()? }),
            KIND_RAFT => PeerMessage::Cab(CabMessage::Raft(self.bytes(Limit::RaftBytes)?)),
            KIND_FORWARD => PeerMessage::Cab(CabMessage::Forward { ids: self.ids()? }),
            KIND_COMPACT => PeerMessage::Cab(CabMessage::Compact {
                through: self.varint()?,
            }),
            kind @ (KIND_PROBE | KIND_PROBE_ECHO) => PeerMessage::Probe(Probe {
                stamp_us: self.varint()?,
                rtt_us: self.varint()?,
                echo: kind == KIND_PROBE_ECHO,
            }),
            kind @ (KIND_HELLO | KIND_HELLO_REPLY) => PeerMessage::Hello(self.hello(kind)?),
            KIND_STABLE => PeerMessage::Stable(Stable {
                applied_us: self.varint()?,
                global_us: self.varint()?,
            }),
            KIND_SNAPSHOT_FETCH => PeerMessage::Snapshot(SnapshotMessage::Fetch {
                transfer: self.varint()?,
                min_index: self.varint()?,
                offset: self.varint()?,
            }),
            KIND_SNAPSHOT_CHUNK => {
                PeerMessage::Snapshot(SnapshotMessage::Chunk(self.snapshot_chunk()?))
            }
            KIND_SNAPSHOT_REFUSED => {
                let transfer = self.varint()?;
                let offset = self.pos();
                let retry = match self.byte()? {
                    0 => false,
                    1 => true,
                    value => return Err(DecodeError::NotABool { value, offset }),
                };
                PeerMessage::Snapshot(SnapshotMessage::Refused { transfer, retry })
            }
            tag => {
                return Err(DecodeError::UnknownKind {
                    tag,
                    offset: kind_offset,
                })
            }
        };
        self.finish()?;
        Ok(msg)
    }

    fn ids(&mut self) -> Result<Vec<OpId>, DecodeError> {
        let n = self.length(Some(Limit::IdsPerMessage), ID_BYTES_MIN)?;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(self.id()?);
        }
        Ok(ids)
    }

    fn digest(&mut self) -> Result<Vec<(ReplicaId, u64)>, DecodeError> {
        let n = self.length(Some(Limit::IdsPerMessage), ID_BYTES_MIN)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let origin = self.replica()?;
            entries.push((origin, self.varint()?));
        }
        Ok(entries)
    }

    fn ops(&mut self) -> Result<Vec<Arc<Op>>, DecodeError> {
        let n = self.length(Some(Limit::OpsPerMessage), OP_BYTES_MIN)?;
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            ops.push(Arc::new(self.op()?));
        }
        Ok(ops)
    }

    fn op(&mut self) -> Result<Op, DecodeError> {
        let id = self.id()?;
        let timestamp = Timestamp(self.u64le()?);
        let flags_offset = self.pos();
        let flags = self.byte()?;
        if flags & !FLAGS_KNOWN != 0 {
            return Err(DecodeError::UnknownFlags {
                flags,
                offset: flags_offset,
            });
        }
        let strong = flags & FLAG_STRONG != 0;
        if strong != (flags & FLAG_CONTEXT != 0) {
            return Err(DecodeError::StrongContextMismatch {
                strong,
                offset: flags_offset,
            });
        }
        let name = self.name()?;
        let args = self.bytes(Limit::ArgsBytes)?;
        let request_id = if flags & FLAG_REQUEST_ID != 0 {
            let client = self.u64le()?;
            let seq = self.varint()?;
            Some(ClientRequestId { client, seq })
        } else {
            None
        };
        let acked = if flags & FLAG_ACKED != 0 {
            let n = self.length(None, 1)?;
            (0..n)
                .map(|_| self.varint())
                .collect::<Result<Vec<u64>, _>>()?
        } else {
            Vec::new()
        };
        let user = if flags & FLAG_USER != 0 {
            Some(self.name()?)
        } else {
            None
        };
        let causal_context = if strong { Some(self.dvv()?) } else { None };
        Ok(Op {
            id,
            timestamp,
            call: ProcCall {
                name,
                args,
                request_id,
                acked,
                time_us: timestamp.physical_us(),
                strong,
                op: Some((u64::from(id.origin.0), id.seq)),
                user,
            },
            strong,
            causal_context,
        })
    }

    /// A procedure's or a user's name: `len` (≤ `proc_name_bytes_max`),
    /// then UTF-8.
    fn name(&mut self) -> Result<Arc<str>, DecodeError> {
        let len = self.length(Some(Limit::ProcNameBytes), 1)?;
        let offset = self.pos();
        std::str::from_utf8(self.take(len)?)
            .map_err(|_| DecodeError::InvalidUtf8 { offset })
            .map(Arc::<str>::from)
    }

    fn dvv(&mut self) -> Result<Dvv, DecodeError> {
        // Records are bounded by the frame only (each takes 3 bytes or more);
        // duplicated origins are merged by `from_records`.
        let n = self.length(None, RECORD_BYTES_MIN)?;
        let mut records = Vec::with_capacity(n);
        let mut exceptions_total: usize = 0;
        for _ in 0..n {
            let origin = self.replica()?;
            let counter = self.varint()?;
            let count_offset = self.pos();
            let count = self.length(Some(Limit::DvvExceptions), 1)?;
            exceptions_total = exceptions_total.saturating_add(count);
            let max = self.limits.dvv_exceptions_max;
            if exceptions_total > max {
                return Err(DecodeError::LimitExceeded {
                    limit: Limit::DvvExceptions,
                    len: exceptions_total as u64,
                    max,
                    offset: count_offset,
                });
            }
            let mut runs = RunsFromGaps::new(counter);
            for _ in 0..count {
                let offset = self.pos();
                let gap = self.varint()?;
                runs.push(gap).ok_or(DecodeError::SeqOverflow { offset })?;
            }
            records.push((origin, counter, runs.finish()));
        }
        Ok(Dvv::from_runs(records))
    }
}
