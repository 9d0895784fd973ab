"""S3 adapter for the per-task artifacts (`artifacts/{task_id}/{name}`, names and bounds in
`steward.domain.artifacts`) and the plans' kept documents (`plans/{plan_id}/{content hash}.md`,
`steward.domain.plan_diff`: what a plan's content hashes name, written by the plan service).

Reads, existence checks and presigned downloads serve the client API; presigned uploads
serve the runtime routes, so the runtime writes its artifacts straight to S3 without any AWS
credential and without its bytes passing through a Lambda. A presigned upload is SigV4 with
`Content-Type` and `Content-Length` among the signed headers: S3 refuses a PUT of any other
length or type, so the size the runtime declared is the size stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from steward.adapters import aws
from steward.adapters.dynamo import error_code
from steward.domain.artifacts import ARTIFACT_NAMES, SCREEN_NAME, artifact_key
from steward.domain.plan_diff import document_key

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["ARTIFACT_NAMES", "PRESIGN_SECONDS", "SCREEN_NAME", "ArtifactStore"]

PRESIGN_SECONDS = 300


class ArtifactStore:
    def __init__(self, bucket: str, client: S3Client | None = None, **client_kwargs: Any) -> None:
        self.bucket = bucket
        if client is None:
            # Loaded with the client, not the module (`steward.adapters.aws` says why).
            from botocore.config import Config  # noqa: PLC0415

            # Query-string SigV4 signs the headers present at signing; SigV2 (which botocore
            # may pick for a custom endpoint) signs neither length nor type.
            client = aws.client("s3", config=Config(signature_version="s3v4"), **client_kwargs)
        self._s3: S3Client = client

    @staticmethod
    def key(task_id: str, name: str) -> str:
        return artifact_key(task_id, name)

    def exists(self, task_id: str, name: str) -> bool:
        try:
            self._s3.head_object(Bucket=self.bucket, Key=self.key(task_id, name))
        except ClientError as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def presigned_url(self, task_id: str, name: str) -> str:
        return self._s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self.key(task_id, name)},
            ExpiresIn=PRESIGN_SECONDS,
        )

    def presigned_put(
        self, task_id: str, name: str, *, content_type: str, content_length: int, expires_seconds: int
    ) -> str:
        """A URL that PUTs exactly `content_length` bytes of `content_type` to the artifact."""
        return self._s3.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": self.key(task_id, name),
                "ContentType": content_type,
                "ContentLength": content_length,
            },
            ExpiresIn=expires_seconds,
        )

    def sizes(self, task_id: str) -> list[tuple[str, int]]:
        """(name, size in bytes) of the task's artifacts that exist, in the order of
        `ARTIFACT_NAMES`; keys under the prefix that are not artifacts are not shown."""
        prefix = self.key(task_id, "")
        found: dict[str, int] = {}
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"][len(prefix) :]] = int(item["Size"])
        return [(name, found[name]) for name in ARTIFACT_NAMES if name in found]

    def read_text(self, task_id: str, name: str) -> str | None:
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=self.key(task_id, name))["Body"]
        except ClientError as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return body.read().decode("utf-8", errors="replace")

    def put(self, task_id: str, name: str, body: bytes, content_type: str) -> None:
        self._s3.put_object(
            Bucket=self.bucket, Key=self.key(task_id, name), Body=body, ContentType=content_type
        )

    # ---- kept plan documents
    def put_plan_document(self, plan_id: str, content_hash: str, text: str) -> None:
        self._s3.put_object(
            Bucket=self.bucket,
            Key=document_key(plan_id, content_hash),
            Body=text.encode("utf-8"),
            ContentType="text/markdown; charset=utf-8",
        )

    def plan_document(self, plan_id: str, content_hash: str) -> str | None:
        """The kept document, or None when there is none (or it is not UTF-8: not Steward's)."""
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=document_key(plan_id, content_hash))["Body"]
        except ClientError as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        try:
            return body.read().decode("utf-8")
        except UnicodeDecodeError:
            return None
