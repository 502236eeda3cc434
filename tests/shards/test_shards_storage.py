"""Storage by URL: local paths, ``file://`` and a real S3 server (SeaweedFS); errors name the URL."""

from __future__ import annotations

import pickle
import socket
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server

from loaderfactory.shards import Storage, StorageError
from loaderfactory.shards.storage import signed_get
from loaderfactory.shards.storage import store as storage_module
from loaderfactory.shards.storage.remote_fs import s3_options


def _roundtrip(storage: Storage, folder: str) -> None:
    storage.write(f"{folder}/b/two.bin", b"0123456789")
    storage.write(f"{folder}/a.bin", b"abc")
    assert storage.list(f"{folder}/") == [f"{folder}/a.bin", f"{folder}/b/two.bin"]
    assert storage.size(f"{folder}/b/two.bin") == 10
    assert storage.read(f"{folder}/a.bin") == b"abc"
    assert storage.read_range(f"{folder}/b/two.bin", 3, 7) == b"3456"
    assert storage.read_range(f"{folder}/b/two.bin", 8, 20) == b"89"


@pytest.mark.parametrize("prefix", ["", "file://"])
def test_local_paths_list_size_read_ranges_and_write(tmp_path: Path, prefix: str) -> None:
    """A local folder, plain or as ``file://``, lists recursively and reads whole or by range."""
    _roundtrip(Storage(), f"{prefix}{tmp_path}")


def test_s3_lists_sizes_reads_ranges_and_writes(s3: S3Server) -> None:
    """The same operations against a real S3 server, signed with ``storage_options``."""
    _roundtrip(Storage(s3.storage_options), s3.url("storage/roundtrip"))


def test_s3_settings_come_from_the_aws_environment(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``storage_options``, the endpoint and credentials come from ``AWS_*`` variables."""
    Storage(s3.storage_options).write(s3.url("storage/env.bin"), b"from env")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret)
    assert Storage().read(s3.url("storage/env.bin")) == b"from env"


@pytest.mark.parametrize("call", ["read", "size", "read_range"])
def test_a_missing_object_is_file_not_found_naming_the_url(s3: S3Server, tmp_path: Path, call: str) -> None:
    """A missing key (S3) or file (local) raises FileNotFoundError with its URL, without retrying."""
    for storage, url in [
        (Storage(s3.storage_options), s3.url("nope/x.tar")),
        (Storage(), f"{tmp_path}/x.tar"),
    ]:
        args = (url, 0, 4) if call == "read_range" else (url,)
        with pytest.raises(FileNotFoundError, match=r"no such shard or object .*x\.tar"):
            getattr(storage, call)(*args)
        assert storage.retried == 0


def test_a_server_that_is_gone_fails_after_the_retries_with_the_url(s3: S3Server) -> None:
    """Nothing listening: each call is retried ``retries`` times with backoff, counted, then StorageError."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: a port nobody listens on
    options = {**s3.storage_options, "endpoint_url": f"http://127.0.0.1:{port}"}
    storage = Storage(options, retries=2, backoff_s=0.01)
    with pytest.raises(StorageError, match=r"s3://shards-test/gone\.tar: failed after 2 retries") as info:
        storage.read(s3.url("gone.tar"))
    assert isinstance(info.value, OSError)
    assert storage.retried == 2


def test_a_transient_error_is_retried_and_counted(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that fails once and then works returns the data, and the retry is counted."""
    import s3fs

    Storage(s3.storage_options).write(s3.url("storage/flaky.bin"), b"payload")
    real, failures = s3fs.S3FileSystem._cat_file, [ConnectionResetError("connection reset by peer")]

    async def flaky(*args: object, **kwargs: object) -> object:
        if failures:
            raise failures.pop()
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(s3fs.S3FileSystem, "_cat_file", flaky)  # s3fs's async read, under its sync one
    storage = Storage(s3.storage_options, retries=3, backoff_s=0.01)  # its filesystem binds the patch
    assert storage.read_range(s3.url("storage/flaky.bin"), 0, 3) == b"pay"
    assert storage.retried == 1


def test_storage_pickles_without_its_connections(s3: S3Server) -> None:
    """A pickled copy (what a worker process gets) reconnects on first use and reads the same bytes."""
    storage = Storage(s3.storage_options)
    storage.write(s3.url("storage/pickle.bin"), b"same")
    copy = pickle.loads(pickle.dumps(storage))
    assert copy.read(s3.url("storage/pickle.bin")) == b"same"


def test_an_unknown_scheme_names_the_supported_ones() -> None:
    """``ftp://`` is refused with the list of schemes that work."""
    with pytest.raises(
        ValueError, match=r"ftp://h/x.tar: unsupported scheme 'ftp'; use a local path, file://"
    ):
        Storage().read("ftp://h/x.tar")


@pytest.mark.parametrize(
    ("options", "plain"),
    [
        ({}, True),
        ({"endpoint_url": "http://127.0.0.1:1", "key": "k", "secret": "s", "region": "eu-west-1"}, True),
        ({"anon": True, "config_kwargs": {"s3": {"addressing_style": "path"}}}, True),
        ({"requester_pays": True}, False),
        ({"s3_additional_kwargs": {"SSECustomerKey": "k", "SSECustomerAlgorithm": "AES256"}}, False),
        ({"client_kwargs": {"verify": False}}, False),
        ({"config_kwargs": {"proxies": {"https": "http://proxy:3128"}}}, False),
    ],
)
def test_only_settings_a_signed_url_carries_fetch_by_signed_get(
    options: dict[str, object], plain: bool
) -> None:
    """Credentials, endpoint, region and addressing travel in a presigned URL; settings that add
    headers, arguments, proxies or certificate checks to each request keep fetches on s3fs."""
    assert signed_get.plain_s3_settings(s3_options(dict(options))) is plain


def test_a_shard_fetched_by_signed_get_is_byte_exact(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``download`` of a plain S3 object writes its exact bytes, piece after piece."""
    monkeypatch.setattr(signed_get, "PIECE_BYTES", 1000)
    data = bytes(range(256)) * 4099  # not a whole number of pieces
    url = s3.url("storage/signed.bin")
    Storage(s3.storage_options).write(url, data)
    storage = Storage(s3.storage_options)
    out = tmp_path / "copy"
    with open(out, "wb") as file:
        storage.download(url, file, len(data))
    assert out.read_bytes() == data


def test_an_object_shorter_than_its_listed_size_fails_naming_the_url(s3: S3Server, tmp_path: Path) -> None:
    """An object that shrank since it was sized is not taken as whole: the answer tells its size, so
    the fetch fails at once (no retry can help), naming the URL and both sizes."""
    url = s3.url("storage/shrunk.bin")
    Storage(s3.storage_options).write(url, b"x" * 1000)
    storage = Storage(s3.storage_options, retries=1, backoff_s=0.01)
    with open(tmp_path / "copy", "wb") as file, pytest.raises(StorageError) as caught:
        storage.download(url, file, 1500)
    told = f"{url}: the answer says the object has 1000 bytes where 1500 were expected; it changed"
    assert str(caught.value).startswith(told)
    assert storage.retried == 0


def test_a_store_refusing_signed_urls_is_read_through_s3fs(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signed GET answered with a refusal or a redirect (a bucket in another region, a store without
    query-string signatures) is not an error: the rest of the object, and every later one, comes
    through s3fs, and the copy is exact."""
    data = bytes(range(256)) * 40
    url = s3.url("storage/refused.bin")
    Storage(s3.storage_options).write(url, data)
    calls = []

    def refuse_after_a_piece(signed: str, start: int, end: int, out: Any, *rest: Any) -> None:
        calls.append(start)
        out.write(data[start:1000])
        raise signed_get.SignedUrlRefused("HTTP 301: Moved Permanently")

    monkeypatch.setattr(signed_get, "get_into", refuse_after_a_piece)
    monkeypatch.setattr(storage_module, "RANGE_BYTES", 4096)
    storage = Storage(s3.storage_options)
    for copy in ("first", "second"):
        with open(tmp_path / copy, "wb") as file:
            storage.download(url, file, len(data))
        assert (tmp_path / copy).read_bytes() == data
    assert calls == [0] and storage.retried == 0


def test_a_signed_url_the_server_rejects_is_a_refusal(s3: S3Server, tmp_path: Path) -> None:
    """The real server's answer to a signature it does not accept becomes SignedUrlRefused (so the
    read goes through s3fs), never data and never a retry of the same URL."""
    url = s3.url("storage/tampered.bin")
    storage = Storage(s3.storage_options)
    storage.write(url, b"abc" * 100)
    fs, path = storage._remote("s3", url[len("s3://") :])
    signed = fs.sign(path, expiration=60)
    with open(tmp_path / "copy", "wb") as out:
        signed_get.get_into(signed, 0, 300, out, None, 10)
    assert (tmp_path / "copy").read_bytes() == b"abc" * 100
    with open(tmp_path / "copy", "wb") as out, pytest.raises(signed_get.SignedUrlRefused, match="403"):
        signed_get.get_into(signed.replace("Signature=", "Signature=0"), 0, 300, out, None, 10)


@pytest.mark.parametrize(
    ("url", "package", "extra"),
    [
        ("s3://b/x.tar", "s3fs", "s3"),
        ("gs://b/x.tar", "gcsfs", "gcs"),
        ("https://h/x.tar", "aiohttp", "http"),
    ],
)
def test_a_scheme_without_its_package_names_its_extra(
    url: str, package: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote URL whose fsspec implementation cannot be imported names the package and the scheme's own
    extra (not every remote package at once)."""
    import fsspec

    def missing(protocol: str) -> None:
        raise ImportError(f"No module named {package!r}")

    monkeypatch.setattr(fsspec, "get_filesystem_class", missing)
    with pytest.raises(
        ImportError, match=rf'need fsspec and {package}: pip install "loaderfactory\[{extra}\]"'
    ):
        Storage().size(url)
