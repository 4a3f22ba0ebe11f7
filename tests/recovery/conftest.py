"""Fixtures for the recovery tests: the session's moto S3 server comes from ``tests/conftest.py``."""

from tests.conftest import S3Server

__all__ = ["S3Server"]
