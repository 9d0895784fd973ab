"""Webhook: the webhook Lambda's Function URL, auth NONE. The one unauthenticated entry:
the delivery's HMAC (X-Hub-Signature-256, checked by the handler) is its authentication."""

from __future__ import annotations

from aws_cdk import aws_lambda as lambda_
from constructs import Construct


class Webhook(Construct):
    def __init__(self, scope: Construct, id: str, *, function: lambda_.IFunction) -> None:
        super().__init__(scope, id)
        self.url = lambda_.FunctionUrl(
            self, "Url", function=function, auth_type=lambda_.FunctionUrlAuthType.NONE
        )
