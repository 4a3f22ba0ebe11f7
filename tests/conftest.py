"""Fixtures shared by every test folder: one moto S3 server per session (moto's backend is per process, so two
servers would share buckets, and the second could not create its own)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import tests.profiles  # noqa: F401  (loads the Hypothesis profile before any test module is imported)


@dataclass(frozen=True)
class S3Server:
    """A moto S3 server on 127.0.0.1 with one bucket, and the options s3fs needs to reach it."""

    endpoint: str
    bucket: str

    def options(self) -> dict[str, Any]:
        """``storage_options`` for ``FsspecStaging`` / s3fs."""
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "eu-west-1"},
            "skip_instance_cache": True,
        }


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3-compatible HTTP server (moto) on a free port of 127.0.0.1, stopped after the tests."""
    pytest.importorskip("s3fs")
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        s3 = S3Server(f"http://{host}:{port}", "staging")
        import s3fs

        s3fs.S3FileSystem(**s3.options()).mkdir(s3.bucket)
        yield s3
    finally:
        server.stop()
