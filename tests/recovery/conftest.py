"""Fixtures for the recovery tests: the workflow tests' moto S3 server, shared rather than started twice."""

from tests.workflow.conftest import S3Server, s3_server

__all__ = ["S3Server", "s3_server"]
