from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AppendRequest(_message.Message):
    __slots__ = ("group", "remote_id", "bodies", "request_id", "magic", "stamp")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MAGIC_FIELD_NUMBER: _ClassVar[int]
    STAMP_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    request_id: int
    magic: int
    stamp: ProducerStamp
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., bodies: _Optional[_Iterable[bytes]] = ..., request_id: _Optional[int] = ..., magic: _Optional[int] = ..., stamp: _Optional[_Union[ProducerStamp, _Mapping]] = ...) -> None: ...

class ProducerStamp(_message.Message):
    __slots__ = ("producer_id", "epoch", "first_sequence")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    epoch: int
    first_sequence: int
    def __init__(self, producer_id: _Optional[int] = ..., epoch: _Optional[int] = ..., first_sequence: _Optional[int] = ...) -> None: ...

class IndexRun(_message.Message):
    __slots__ = ("first_index", "count")
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    first_index: int
    count: int
    def __init__(self, first_index: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("code", "leader_id", "term", "leader_address", "first_index", "count", "request_id", "message", "duplicate", "runs")
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    code: int
    leader_id: str
    term: int
    leader_address: str
    first_index: int
    count: int
    request_id: int
    message: str
    duplicate: bool
    runs: _containers.RepeatedCompositeFieldContainer[IndexRun]
    def __init__(self, code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., leader_address: _Optional[str] = ..., first_index: _Optional[int] = ..., count: _Optional[int] = ..., request_id: _Optional[int] = ..., message: _Optional[str] = ..., duplicate: _Optional[bool] = ..., runs: _Optional[_Iterable[_Union[IndexRun, _Mapping]]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("group", "remote_id", "index", "count", "max_bytes", "decode_records")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    DECODE_RECORDS_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    index: int
    count: int
    max_bytes: int
    decode_records: bool
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., index: _Optional[int] = ..., count: _Optional[int] = ..., max_bytes: _Optional[int] = ..., decode_records: _Optional[bool] = ...) -> None: ...

class RecordHeader(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("key", "timestamp", "headers", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    timestamp: int
    headers: _containers.RepeatedCompositeFieldContainer[RecordHeader]
    value: bytes
    def __init__(self, key: _Optional[bytes] = ..., timestamp: _Optional[int] = ..., headers: _Optional[_Iterable[_Union[RecordHeader, _Mapping]]] = ..., value: _Optional[bytes] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("index", "term", "pos", "magic", "body", "body_crc", "record")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    MAGIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    BODY_CRC_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: int
    pos: int
    magic: int
    body: bytes
    body_crc: int
    record: Record
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., pos: _Optional[int] = ..., magic: _Optional[int] = ..., body: _Optional[bytes] = ..., body_crc: _Optional[int] = ..., record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("code", "leader_id", "term", "leader_address", "entries", "committed_index", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    leader_id: str
    term: int
    leader_address: str
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    committed_index: int
    message: str
    def __init__(self, code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., leader_address: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., committed_index: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReadCommittedRequest(_message.Message):
    __slots__ = ("group", "remote_id", "from_index", "to_index", "max_batch_bytes", "max_batch_count", "follow", "layout")
    class Layout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PACKED: _ClassVar[ReadCommittedRequest.Layout]
        FIXED_WIDTH: _ClassVar[ReadCommittedRequest.Layout]
    PACKED: ReadCommittedRequest.Layout
    FIXED_WIDTH: ReadCommittedRequest.Layout
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    TO_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    from_index: int
    to_index: int
    max_batch_bytes: int
    max_batch_count: int
    follow: bool
    layout: ReadCommittedRequest.Layout
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., from_index: _Optional[int] = ..., to_index: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ..., max_batch_count: _Optional[int] = ..., follow: _Optional[bool] = ..., layout: _Optional[_Union[ReadCommittedRequest.Layout, str]] = ...) -> None: ...

class ColumnBatch(_message.Message):
    __slots__ = ("index", "term", "pos", "offsets", "bodies", "magic", "index_le", "term_le", "pos_le", "offsets_le", "magic_le")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    MAGIC_FIELD_NUMBER: _ClassVar[int]
    INDEX_LE_FIELD_NUMBER: _ClassVar[int]
    TERM_LE_FIELD_NUMBER: _ClassVar[int]
    POS_LE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_LE_FIELD_NUMBER: _ClassVar[int]
    MAGIC_LE_FIELD_NUMBER: _ClassVar[int]
    index: _containers.RepeatedScalarFieldContainer[int]
    term: _containers.RepeatedScalarFieldContainer[int]
    pos: _containers.RepeatedScalarFieldContainer[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    bodies: bytes
    magic: _containers.RepeatedScalarFieldContainer[int]
    index_le: bytes
    term_le: bytes
    pos_le: bytes
    offsets_le: bytes
    magic_le: bytes
    def __init__(self, index: _Optional[_Iterable[int]] = ..., term: _Optional[_Iterable[int]] = ..., pos: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Iterable[int]] = ..., bodies: _Optional[bytes] = ..., magic: _Optional[_Iterable[int]] = ..., index_le: _Optional[bytes] = ..., term_le: _Optional[bytes] = ..., pos_le: _Optional[bytes] = ..., offsets_le: _Optional[bytes] = ..., magic_le: _Optional[bytes] = ...) -> None: ...

class ReadCommittedResponse(_message.Message):
    __slots__ = ("code", "leader_id", "term", "committed_index", "batch", "message", "leader_address")
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_INDEX_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    code: int
    leader_id: str
    term: int
    committed_index: int
    batch: ColumnBatch
    message: str
    leader_address: str
    def __init__(self, code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., committed_index: _Optional[int] = ..., batch: _Optional[_Union[ColumnBatch, _Mapping]] = ..., message: _Optional[str] = ..., leader_address: _Optional[str] = ...) -> None: ...

class InitProducerRequest(_message.Message):
    __slots__ = ("group", "remote_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ...) -> None: ...

class InitProducerResponse(_message.Message):
    __slots__ = ("code", "leader_id", "term", "leader_address", "message", "producer_id", "epoch")
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    code: int
    leader_id: str
    term: int
    leader_address: str
    message: str
    producer_id: int
    epoch: int
    def __init__(self, code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., leader_address: _Optional[str] = ..., message: _Optional[str] = ..., producer_id: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("group", "remote_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "address", "role", "match_index", "snapshot_index")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    role: str
    match_index: int
    snapshot_index: int
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., role: _Optional[str] = ..., match_index: _Optional[int] = ..., snapshot_index: _Optional[int] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("code", "leader_id", "term", "leader_address", "group", "self_id", "role", "peers", "members", "begin_index", "end_index", "end_term", "committed_index", "applied_index", "message", "vote_hold", "store_health", "machine_health")
    class PeersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SELF_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    BEGIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    END_INDEX_FIELD_NUMBER: _ClassVar[int]
    END_TERM_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VOTE_HOLD_FIELD_NUMBER: _ClassVar[int]
    STORE_HEALTH_FIELD_NUMBER: _ClassVar[int]
    MACHINE_HEALTH_FIELD_NUMBER: _ClassVar[int]
    code: int
    leader_id: str
    term: int
    leader_address: str
    group: str
    self_id: str
    role: str
    peers: _containers.ScalarMap[str, str]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    begin_index: int
    end_index: int
    end_term: int
    committed_index: int
    applied_index: int
    message: str
    vote_hold: str
    store_health: str
    machine_health: str
    def __init__(self, code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., leader_address: _Optional[str] = ..., group: _Optional[str] = ..., self_id: _Optional[str] = ..., role: _Optional[str] = ..., peers: _Optional[_Mapping[str, str]] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., begin_index: _Optional[int] = ..., end_index: _Optional[int] = ..., end_term: _Optional[int] = ..., committed_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., message: _Optional[str] = ..., vote_hold: _Optional[str] = ..., store_health: _Optional[str] = ..., machine_health: _Optional[str] = ...) -> None: ...

class LeadershipTransferRequest(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "transfer_id", "transferee_id", "take_leadership_ledger_index")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSFEREE_ID_FIELD_NUMBER: _ClassVar[int]
    TAKE_LEADERSHIP_LEDGER_INDEX_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    transfer_id: str
    transferee_id: str
    take_leadership_ledger_index: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., transfer_id: _Optional[str] = ..., transferee_id: _Optional[str] = ..., take_leadership_ledger_index: _Optional[int] = ...) -> None: ...

class LeadershipTransferResponse(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "leader_address", "message")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    leader_address: str
    message: str
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., leader_address: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("group", "remote_id", "requests", "mode")
    class ReadMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        READ_INDEX: _ClassVar[QueryRequest.ReadMode]
        UNSAFE: _ClassVar[QueryRequest.ReadMode]
        LEASE: _ClassVar[QueryRequest.ReadMode]
        RAFT_LOG: _ClassVar[QueryRequest.ReadMode]
    READ_INDEX: QueryRequest.ReadMode
    UNSAFE: QueryRequest.ReadMode
    LEASE: QueryRequest.ReadMode
    RAFT_LOG: QueryRequest.ReadMode
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    requests: _containers.RepeatedScalarFieldContainer[bytes]
    mode: QueryRequest.ReadMode
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., requests: _Optional[_Iterable[bytes]] = ..., mode: _Optional[_Union[QueryRequest.ReadMode, str]] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("code", "leader_id", "term", "leader_address", "answers", "read_index", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    READ_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    leader_id: str
    term: int
    leader_address: str
    answers: _containers.RepeatedScalarFieldContainer[bytes]
    read_index: int
    message: str
    def __init__(self, code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., leader_address: _Optional[str] = ..., answers: _Optional[_Iterable[bytes]] = ..., read_index: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "ledger_end_index", "ledger_end_term", "pre_vote", "leadership_transfer", "group_id", "incarnation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEDGER_END_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEDGER_END_TERM_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    LEADERSHIP_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    ledger_end_index: int
    ledger_end_term: int
    pre_vote: bool
    leadership_transfer: bool
    group_id: str
    incarnation: str
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., ledger_end_index: _Optional[int] = ..., ledger_end_term: _Optional[int] = ..., pre_vote: _Optional[bool] = ..., leadership_transfer: _Optional[bool] = ..., group_id: _Optional[str] = ..., incarnation: _Optional[str] = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "vote_result", "ledger_end_index", "ledger_end_term", "leader_seen")
    class Result(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[VoteResponse.Result]
        ACCEPT: _ClassVar[VoteResponse.Result]
        REJECT_UNKNOWN_LEADER: _ClassVar[VoteResponse.Result]
        REJECT_UNEXPECTED_LEADER: _ClassVar[VoteResponse.Result]
        REJECT_EXPIRED_VOTE_TERM: _ClassVar[VoteResponse.Result]
        REJECT_ALREADY_VOTED: _ClassVar[VoteResponse.Result]
        REJECT_ALREADY_HAS_LEADER: _ClassVar[VoteResponse.Result]
        REJECT_TERM_NOT_READY: _ClassVar[VoteResponse.Result]
        REJECT_TERM_SMALL_THAN_LEDGER: _ClassVar[VoteResponse.Result]
        REJECT_EXPIRED_LEDGER_TERM: _ClassVar[VoteResponse.Result]
        REJECT_SMALL_LEDGER_END_INDEX: _ClassVar[VoteResponse.Result]
        REJECT_TAKING_LEADERSHIP: _ClassVar[VoteResponse.Result]
        REJECT_HOLDING_AFTER_RESTART: _ClassVar[VoteResponse.Result]
    UNKNOWN: VoteResponse.Result
    ACCEPT: VoteResponse.Result
    REJECT_UNKNOWN_LEADER: VoteResponse.Result
    REJECT_UNEXPECTED_LEADER: VoteResponse.Result
    REJECT_EXPIRED_VOTE_TERM: VoteResponse.Result
    REJECT_ALREADY_VOTED: VoteResponse.Result
    REJECT_ALREADY_HAS_LEADER: VoteResponse.Result
    REJECT_TERM_NOT_READY: VoteResponse.Result
    REJECT_TERM_SMALL_THAN_LEDGER: VoteResponse.Result
    REJECT_EXPIRED_LEDGER_TERM: VoteResponse.Result
    REJECT_SMALL_LEDGER_END_INDEX: VoteResponse.Result
    REJECT_TAKING_LEADERSHIP: VoteResponse.Result
    REJECT_HOLDING_AFTER_RESTART: VoteResponse.Result
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    VOTE_RESULT_FIELD_NUMBER: _ClassVar[int]
    LEDGER_END_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEDGER_END_TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_SEEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    vote_result: VoteResponse.Result
    ledger_end_index: int
    ledger_end_term: int
    leader_seen: bool
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., vote_result: _Optional[_Union[VoteResponse.Result, str]] = ..., ledger_end_index: _Optional[int] = ..., ledger_end_term: _Optional[int] = ..., leader_seen: _Optional[bool] = ...) -> None: ...

class HeartBeatRequest(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "ledger_end_index", "group_id", "incarnation", "retention_floor")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEDGER_END_INDEX_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FLOOR_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    ledger_end_index: int
    group_id: str
    incarnation: str
    retention_floor: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., ledger_end_index: _Optional[int] = ..., group_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., retention_floor: _Optional[int] = ...) -> None: ...

class HeartBeatResponse(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class PushEntryRequest(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "type", "prev_index", "prev_term", "commit_index", "first_index", "count", "last_term", "entries", "group_id", "incarnation", "data_file_size")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[PushEntryRequest.Type]
        APPEND: _ClassVar[PushEntryRequest.Type]
        COMMIT: _ClassVar[PushEntryRequest.Type]
        COMPARE: _ClassVar[PushEntryRequest.Type]
        TRUNCATE: _ClassVar[PushEntryRequest.Type]
    TYPE_UNSPECIFIED: PushEntryRequest.Type
    APPEND: PushEntryRequest.Type
    COMMIT: PushEntryRequest.Type
    COMPARE: PushEntryRequest.Type
    TRUNCATE: PushEntryRequest.Type
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PREV_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREV_TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_TERM_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    DATA_FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    type: PushEntryRequest.Type
    prev_index: int
    prev_term: int
    commit_index: int
    first_index: int
    count: int
    last_term: int
    entries: bytes
    group_id: str
    incarnation: str
    data_file_size: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., type: _Optional[_Union[PushEntryRequest.Type, str]] = ..., prev_index: _Optional[int] = ..., prev_term: _Optional[int] = ..., commit_index: _Optional[int] = ..., first_index: _Optional[int] = ..., count: _Optional[int] = ..., last_term: _Optional[int] = ..., entries: _Optional[bytes] = ..., group_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., data_file_size: _Optional[int] = ...) -> None: ...

class PushEntryResponse(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "index", "begin_index", "end_index", "count", "x_term", "x_index")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    BEGIN_INDEX_FIELD_NUMBER: _ClassVar[int]
    END_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    X_TERM_FIELD_NUMBER: _ClassVar[int]
    X_INDEX_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    index: int
    begin_index: int
    end_index: int
    count: int
    x_term: int
    x_index: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., index: _Optional[int] = ..., begin_index: _Optional[int] = ..., end_index: _Optional[int] = ..., count: _Optional[int] = ..., x_term: _Optional[int] = ..., x_index: _Optional[int] = ...) -> None: ...

class InstallSnapshotRequest(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "last_included_index", "last_included_term", "data", "group_id", "incarnation", "total_size", "total_crc32", "offset", "chunk_crc32", "next_pos")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LAST_INCLUDED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INCLUDED_TERM_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CRC32_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    CHUNK_CRC32_FIELD_NUMBER: _ClassVar[int]
    NEXT_POS_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    last_included_index: int
    last_included_term: int
    data: bytes
    group_id: str
    incarnation: str
    total_size: int
    total_crc32: int
    offset: int
    chunk_crc32: int
    next_pos: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., last_included_index: _Optional[int] = ..., last_included_term: _Optional[int] = ..., data: _Optional[bytes] = ..., group_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., total_size: _Optional[int] = ..., total_crc32: _Optional[int] = ..., offset: _Optional[int] = ..., chunk_crc32: _Optional[int] = ..., next_pos: _Optional[int] = ...) -> None: ...

class InstallSnapshotResponse(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "next_offset", "last_included_index", "last_included_term", "end_index")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_INCLUDED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INCLUDED_TERM_FIELD_NUMBER: _ClassVar[int]
    END_INDEX_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    next_offset: int
    last_included_index: int
    last_included_term: int
    end_index: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., next_offset: _Optional[int] = ..., last_included_index: _Optional[int] = ..., last_included_term: _Optional[int] = ..., end_index: _Optional[int] = ...) -> None: ...

class ReadIndexRequest(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class ReadIndexResponse(_message.Message):
    __slots__ = ("group", "remote_id", "local_id", "code", "leader_id", "term", "index")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    group: str
    remote_id: str
    local_id: str
    code: int
    leader_id: str
    term: int
    index: int
    def __init__(self, group: _Optional[str] = ..., remote_id: _Optional[str] = ..., local_id: _Optional[str] = ..., code: _Optional[int] = ..., leader_id: _Optional[str] = ..., term: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...
