"""Where a run's objects live (:class:`S3Target`), the boto3 client that reaches them, and
the errors that stop a run (:class:`ObjectStoreError`), each naming the endpoint, bucket or key
at fault. boto3 is imported only when a client is made."""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Final

ADDRESSING_STYLES: Final = ("path", "virtual", "auto")


class ObjectStoreError(Exception):
    """A run that cannot start or finish; the message says why (endpoint, bucket or key)."""


@dataclass(frozen=True)
class S3Target:
    """Where the dataset lives: the bucket and how to reach it.

    Attributes:
        bucket: bucket name.
        endpoint: ``http://`` or ``https://`` URL of the S3 endpoint; ``None`` uses boto3's
            default (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` if set, else AWS).
        region: region name; ``None`` uses ``AWS_REGION``/``AWS_DEFAULT_REGION`` or the
            profile's, else ``us-east-1``.
        addressing_style: ``path`` (``URL/bucket/key``, what most S3-compatible servers
            expect; the default), ``virtual`` (``bucket.host/key``) or ``auto``.
    """

    bucket: str
    endpoint: str | None = None
    region: str | None = None
    addressing_style: str = "path"

    def __post_init__(self) -> None:
        if not isinstance(self.bucket, str) or not self.bucket.strip():
            raise ValueError(f"S3Target.bucket must be a non-empty string, got {self.bucket!r}")
        if not _BUCKET.fullmatch(self.bucket) or ".." in self.bucket:
            raise ValueError(
                "S3Target.bucket must be a bucket name (up to 255 letters, digits, '.', '-' and "
                f"'_', starting and ending with a letter or digit, no '..'), got {self.bucket!r}"
            )
        if isinstance(self.endpoint, str) and _has_credentials(self.endpoint):
            # S3 signs requests with the access keys; a password in the URL is never used,
            # only shown, so it is refused without being repeated.
            raise ValueError(
                "S3Target.endpoint must not hold credentials (user:password@): S3 requests "
                "are signed with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE); "
                f"got {redact_url(self.endpoint)!r}"
            )
        if self.endpoint is not None and (
            not isinstance(self.endpoint, str)
            or not self.endpoint.lower().startswith(("http://", "https://"))
            or len(self.endpoint.split("://", 1)[1].strip("/")) == 0
        ):
            raise ValueError(
                f"S3Target.endpoint must be an http:// or https:// URL, got {self.endpoint!r}"
            )
        if self.addressing_style not in ADDRESSING_STYLES:
            raise ValueError(
                f"S3Target.addressing_style must be one of {ADDRESSING_STYLES}, "
                f"got {self.addressing_style!r}"
            )

    @property
    def endpoint_name(self) -> str:
        """The endpoint as error messages name it."""
        if self.endpoint:
            return redact_url(self.endpoint)
        env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        return redact_url(env) if env else "the default AWS S3 endpoint"

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"


# The characters of a bucket name as S3 and the S3-compatible servers take them (the legacy
# rule: up to 255 characters, '_' and capitals allowed); the server judges the rest (AWS
# wants 3 to 63 lower-case characters and says so itself).
_BUCKET = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,253}[A-Za-z0-9])?")


def _has_credentials(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    return parts.username is not None or parts.password is not None


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``, for messages."""
    return re.sub(r"(?<=://)[^/@\s]*@", "***@", url)


def _flat(exc: BaseException) -> str:
    """An exception's message on one line (botocore's validation errors take two), with no
    password of an endpoint URL in it."""
    return redact_url(" ".join(str(exc).split()))


def _botocore_exceptions() -> Any:
    try:
        from botocore import exceptions
    except ImportError:
        raise ObjectStoreError(
            "the object-storage runner needs boto3, which is not installed: "
            "install the s3 extra (pip install 'storage-workloads[s3]')"
        ) from None
    return exceptions


def _make_client(target: S3Target, *, pool: int, attempts: int) -> Any:
    _botocore_exceptions()
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=max(pool, 1),
        retries={"max_attempts": attempts, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
        s3={"addressing_style": target.addressing_style},
    )
    try:
        return boto3.session.Session().client(
            "s3", endpoint_url=target.endpoint, region_name=target.region, config=config
        )
    except ValueError as exc:  # botocore: "Invalid endpoint: ..."
        raise ObjectStoreError(
            f"invalid S3 endpoint {target.endpoint_name}: {_flat(exc)}"
        ) from None
    except Exception as exc:
        raise _explain(exc, target, "creating the S3 client") from None


def _error_code(exc: Any) -> tuple[str, int | None]:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code, status


def _explain(exc: BaseException, target: S3Target, what: str) -> ObjectStoreError:
    """An :class:`ObjectStoreError` that says what failed, where, and why."""
    if isinstance(exc, ObjectStoreError):
        return exc
    be = _botocore_exceptions()
    where = target.endpoint_name
    if isinstance(exc, be.NoCredentialsError | be.PartialCredentialsError):
        return ObjectStoreError(
            f"{what}: no usable AWS credentials for {where}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
        )
    if isinstance(exc, be.ConnectionError | be.HTTPClientError):
        return ObjectStoreError(f"{what}: cannot reach the S3 endpoint {where}: {_flat(exc)}")
    if isinstance(exc, be.ClientError):
        code, status = _error_code(exc)
        if code in {"NoSuchBucket"} or (status == 404 and "bucket" in what):
            return ObjectStoreError(
                f"{what}: bucket {target.bucket!r} does not exist at {where}; "
                "create it with `storage-workloads object prepare`"
            )
        if status == 403 or code in {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
            return ObjectStoreError(
                f"{what}: access denied by {where} ({code or status}): check the credentials "
                f"and the permissions on bucket {target.bucket!r}"
            )
        return ObjectStoreError(f"{what}: {where} answered {code or status}: {_flat(exc)}")
    if isinstance(exc, be.ParamValidationError):
        return ObjectStoreError(f"{what}: invalid request: {_flat(exc)}")
    if isinstance(exc, be.BotoCoreError):
        return ObjectStoreError(f"{what}: {where}: {_flat(exc)}")
    return ObjectStoreError(f"{what}: {type(exc).__name__}: {_flat(exc)}")


def _short(exc: BaseException) -> str:
    code, status = _error_code(exc)
    if code or status:
        return f"{code or status}"
    return f"{type(exc).__name__}: {exc}"


def _bucket_exists(client: Any, target: S3Target) -> bool:
    be = _botocore_exceptions()
    try:
        client.head_bucket(Bucket=target.bucket)
    except be.ClientError as exc:
        code, status = _error_code(exc)
        if status == 404 or code in {"404", "NoSuchBucket", "NotFound"}:
            return False
        raise _explain(exc, target, f"checking bucket {target.bucket!r}") from None
    except Exception as exc:
        raise _explain(exc, target, f"checking bucket {target.bucket!r}") from None
    return True


def _ensure_bucket(client: Any, target: S3Target) -> bool:
    """Create the bucket if it is missing; True if it was created."""
    if _bucket_exists(client, target):
        return False
    be = _botocore_exceptions()
    kwargs: dict[str, Any] = {"Bucket": target.bucket}
    region = client.meta.region_name
    if region and region not in {"us-east-1", "aws-global"}:
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(**kwargs)
    except be.ClientError as exc:
        code, _ = _error_code(exc)
        if code == "BucketAlreadyOwnedByYou":
            return False
        raise _explain(exc, target, f"creating bucket {target.bucket!r}") from None
    except Exception as exc:
        raise _explain(exc, target, f"creating bucket {target.bucket!r}") from None
    return True


def _object_size(client: Any, target: S3Target, key: str) -> int | None:
    """The size of an object, or None if there is no such object."""
    be = _botocore_exceptions()
    try:
        return int(client.head_object(Bucket=target.bucket, Key=key)["ContentLength"])
    except be.ClientError as exc:
        code, status = _error_code(exc)
        if status == 404 or code in {"404", "NoSuchKey", "NotFound"}:
            return None
        raise _explain(exc, target, f"checking object {target.url(key)}") from None
    except Exception as exc:
        raise _explain(exc, target, f"checking object {target.url(key)}") from None


def _existing_objects(client: Any, target: S3Target, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=prefix
        )
        for page in pages:
            for item in page.get("Contents", ()):
                out[item["Key"]] = int(item["Size"])
    except Exception as exc:
        raise _explain(exc, target, f"listing {target.url(prefix)}") from None
    return out
