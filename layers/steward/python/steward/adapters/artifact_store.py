"""S3 adapter for the per-task artifacts (`artifacts/{task_id}/{name}`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from steward.adapters import aws
from steward.adapters.dynamo import error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ARTIFACT_NAMES = ("bootstrap.json", "harness.json", "diff.patch", "git-status.txt", "publish.json")
SCREEN_NAME = "screen.txt"
PRESIGN_SECONDS = 300


class ArtifactStore:
    def __init__(self, bucket: str, client: S3Client | None = None, **client_kwargs: Any) -> None:
        self.bucket = bucket
        self._s3: S3Client = client or aws.client("s3", **client_kwargs)

    @staticmethod
    def key(task_id: str, name: str) -> str:
        return f"artifacts/{task_id}/{name}"

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
