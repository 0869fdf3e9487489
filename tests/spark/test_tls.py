"""The `dledger` data source against a cluster whose members speak mutual TLS: the
options `tlsCert`, `tlsKey`, `tlsCa` (checked without Spark), and a real local Spark
session writing and reading three in-process TLS members; the certificate's role decides
what a job may do."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dledger.security.tls import TlsConfig
from dledger.security.tokens import add_token
from dledger.spark.live import TlsClientFactory, client_factory_for, default_client_factory
from dledger.spark.options import parse_read_options, parse_write_options
from dledger.spark.target import OptionError, parse_target
from tests.security.tls_support import GROUP, TlsGroup, make_certs

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912"


def _files(certs: Path, client: str) -> dict[str, str]:
    return {
        "tlsCert": str(certs / f"client-{client}.crt"),
        "tlsKey": str(certs / f"client-{client}.key"),
        "tlsCa": str(certs / "ca.crt"),
    }


@pytest.mark.unit
def test_the_three_files_make_a_tls_target_and_its_clients_speak_tls() -> None:
    target = parse_target({"peers": PEERS, "tlscert": "c.crt", "TLSKEY": "c.key", "tlsCa": "ca.crt"})
    assert target.tls == TlsConfig("c.crt", "c.key", "ca.crt")
    factory = client_factory_for(target)
    assert factory == TlsClientFactory(TlsConfig("c.crt", "c.key", "ca.crt"))
    assert pickle.loads(pickle.dumps(factory)) == factory  # Spark ships it to the tasks
    assert client_factory_for(parse_target({"peers": PEERS})) is default_client_factory
    assert parse_read_options({"peers": PEERS, **_files(Path("/c"), "r")}, streaming=False).target.tls is not None
    assert parse_write_options({"peers": PEERS, **_files(Path("/c"), "w")}, overwrite=False).target.tls is not None


@pytest.mark.unit
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"peers": PEERS, "tlsCert": "c.crt"}, r"give tlsCert, tlsKey, tlsCa together \(missing tlsKey, tlsCa\)"),
        ({"peers": PEERS, "tlsKey": "k", "tlsCa": "ca"}, r"missing tlsCert"),
        ({"path": "/store", "tlsCa": "ca.crt"}, "option tlsCa is for a live cluster"),
    ],
)
def test_incomplete_or_offline_tls_options_are_clear_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_target(options)


@pytest.mark.unit
def test_a_token_with_the_ca_makes_a_server_side_tls_target() -> None:
    target = parse_target({"peers": PEERS, "tlsCa": "ca.crt", "Token": "secret"})
    assert (target.tls, target.token) == (TlsConfig.ca_only("ca.crt"), "secret")
    factory = client_factory_for(target)
    assert factory == TlsClientFactory(TlsConfig.ca_only("ca.crt"), "secret")
    assert pickle.loads(pickle.dumps(factory)) == factory
    with pytest.raises(OptionError, match="option token is sent over TLS only: give option tlsCa"):
        parse_target({"peers": PEERS, "token": "secret"})
    with pytest.raises(OptionError, match="option token is for a live cluster"):
        parse_target({"path": "/store", "token": "secret"})
    assert parse_read_options({"peers": PEERS, "tlsCa": "c", "token": "t"}, streaming=False).target.token == "t"


@pytest.mark.unit
def test_a_missing_certificate_file_is_named_when_a_client_is_made(tmp_path: Path) -> None:
    files = _files(tmp_path, "nobody")
    factory = client_factory_for(parse_target({"peers": PEERS, **files}))
    with pytest.raises(ValueError, match=f"cannot read the TLS certificate {files['tlsCert']}"):
        factory(PEERS, GROUP, 1.0)


@pytest.fixture(scope="module")
def tls_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsGroup]:
    base = tmp_path_factory.mktemp("tls-spark")
    for role in ("read", "write"):
        (base / f"{role}.token").write_text(add_token(base / "tokens", f"spark-{role}", role))
    group = TlsGroup(base / "data", make_certs(base / "certs"), tokens_file=base / "tokens")
    group.leader()
    yield group
    group.close()


@pytest.mark.spark
def test_spark_writes_and_reads_a_tls_cluster(spark: Any, tls_group: TlsGroup) -> None:
    certs = tls_group.certs
    values = [b"tls-%03d" % k for k in range(120)]
    df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(2)
    df.write.format("dledger").mode("append").option("peers", tls_group.peers).option("group", GROUP).options(
        **_files(certs, "writer")
    ).save()
    read = spark.read.format("dledger").option("peers", tls_group.peers).option("group", GROUP)
    rows = read.options(**_files(certs, "reader")).load().select("value").collect()
    assert sorted(r["value"] for r in rows) == values  # each once (exactly-once over TLS)


@pytest.mark.spark
def test_spark_writes_and_reads_with_bearer_tokens(spark: Any, tls_group: TlsGroup) -> None:
    tokens = tls_group.base.parent
    common = {"peers": tls_group.client_peers, "group": GROUP, "tlsCa": str(tls_group.certs / "ca.crt")}
    values = [b"token-%03d" % k for k in range(50)]
    df = spark.createDataFrame([(v,) for v in values], "value binary").coalesce(1)
    df.write.format("dledger").mode("append").options(**common, token=(tokens / "write.token").read_text()).save()
    read = spark.read.format("dledger").options(**common, token=(tokens / "read.token").read_text()).load()
    rows = read.select("value").collect()
    assert sorted(r["value"] for r in rows if r["value"].startswith(b"token-")) == values
    with pytest.raises(Exception, match=r"client spark-read \(read\): its role may not call Append"):
        df.write.format("dledger").mode("append").options(
            **common, token=(tokens / "read.token").read_text(), rpcTimeoutMs="5000"
        ).save()


@pytest.mark.spark
def test_a_read_certificate_cannot_write_and_plaintext_cannot_reach_the_cluster(
    spark: Any, tls_group: TlsGroup
) -> None:
    df = spark.createDataFrame([(b"refused",)], "value binary").coalesce(1)
    write = df.write.format("dledger").mode("append").option("peers", tls_group.peers).option("group", GROUP)
    with pytest.raises(Exception, match=r"client reader \(read\): its role may not call Append"):
        write.options(**_files(tls_group.certs, "reader"), rpcTimeoutMs="5000").save()
    plain = spark.read.format("dledger").option("peers", tls_group.peers).option("group", GROUP)
    hinted = r"TIMEOUT .*Metadata failed: timed out.*; hint: n0 .* serve TLS: pass the options tlsCert, tlsKey and "
    with pytest.raises(Exception, match=hinted):  # the TLS handshakes fail; the hint says why
        plain.option("connectTimeoutMs", "1000").load().collect()
    plain_write = df.write.format("dledger").mode("append").option("peers", tls_group.peers).option("group", GROUP)
    with pytest.raises(Exception, match=hinted):  # a write asks in writer(), before any task runs
        plain_write.option("connectTimeoutMs", "1000").save()
    with tls_group.client("reader") as client:
        records = client.get_records(0, client.metadata().committed_index + 1)
    assert records and all(r.value != b"refused" for r in records)
