"""Monitoring: a dashboard of the metrics the handlers emit (namespace "Steward", one
`service` dimension per function, see steward.observability) and the alarms, optionally
notifying an SNS topic (context `alarmTopicArn`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import get_args

from aws_cdk import Duration, Stack
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from steward.domain import errors
from steward.domain.webhooks import Status
from steward.observability import NAMESPACE
from steward.services.heartbeat import Outcome

# What `steward.api.http.install_error_handlers` counts for a handler given metrics: each
# refusal by its status (every status an error of `steward.domain.errors` has), and an
# unexpected failure.
_STATUSES = {
    error.status
    for error in vars(errors).values()
    if isinstance(error, type) and issubclass(error, errors.StewardError)
}
_REFUSED = (*(f"Refused{s}" for s in sorted(_STATUSES)), "Failed500")
# What each handler counts (grep add_metric): function -> metric names.
METRICS: dict[str, tuple[str, ...]] = {
    "scheduler": ("UsersScheduled",),
    "heartbeat": ("TasksSpawned", "MalformedTicks", *(f"Tick_{o.value}" for o in Outcome)),
    "relay": ("CallsAdmitted", "ProviderOverReport", *_REFUSED),
    "reaper": ("TasksReaped", "ReservationsExpired", "SpendBrakeEngaged", "SpendLastHourUsd"),
    "webhook": (*(f"Delivery_{s}" for s in get_args(Status)), *_REFUSED),
    "api": _REFUSED,
    "runtime": ("RunnerRequestRefused",),
}


def steward_metric(function: str, name: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"service": function},
        statistic="Sum",
        period=Duration.minutes(5),
    )


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        functions: Mapping[str, lambda_.IFunction],
        dlqs: Mapping[str, sqs.IQueue],
        relay_api: apigateway.RestApi,
        alarm_topic_arn: str | None,
    ) -> None:
        super().__init__(scope, id)
        topic = sns.Topic.from_topic_arn(self, "AlarmTopic", alarm_topic_arn) if alarm_topic_arn else None
        self.alarms: list[cloudwatch.Alarm] = []

        def alarm(name: str, metric: cloudwatch.IMetric, threshold: float, description: str) -> None:
            made = cloudwatch.Alarm(
                self,
                name,
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=description,
            )
            if topic is not None:
                made.add_alarm_action(actions.SnsAction(topic))
            self.alarms.append(made)

        for name, queue in dlqs.items():
            alarm(
                f"{name}DlqDepth",
                queue.metric_approximate_number_of_messages_visible(
                    period=Duration.minutes(5), statistic="Maximum"
                ),
                1,
                f"messages in the {name} dead-letter queue",
            )
        for name, function in functions.items():
            alarm(
                f"{name.capitalize()}Errors",
                function.metric_errors(period=Duration.minutes(5)),
                1,
                f"the {name} function raised",
            )
        alarm(
            "Relay5xx", relay_api.metric_server_error(period=Duration.minutes(5)), 1, "the relay answered 5xx"
        )
        alarm(
            "ReservationsExpired",
            steward_metric("reaper", "ReservationsExpired"),
            1,
            "relay reservations expired unsettled (a relay call died between reserve and settle)",
        )
        alarm(
            "SpendBrakeEngaged",
            steward_metric("reaper", "SpendBrakeEngaged"),
            1,
            "the spend-velocity breaker engaged the global brake: no model call or spawn until an "
            "operator runs `steward admin brake off`",
        )
        alarm(
            "ProviderOverReport",
            steward_metric("relay", "ProviderOverReport"),
            1,
            "a provider reported more usage than the relay reserved",
        )
        alarm(
            "RunnerRequestRefused",
            steward_metric("runtime", "RunnerRequestRefused"),
            1,
            "the relay refused (400) a request of Steward's own runner: a Steward defect, the task "
            "ended retryable; its harness.json holds the refused request",
        )

        widgets: list[cloudwatch.IWidget] = []
        for function, names in METRICS.items():
            widgets.append(
                cloudwatch.GraphWidget(
                    title=f"{function}: counts",
                    left=[steward_metric(function, n) for n in names],
                    width=12,
                )
            )
        widgets.append(
            cloudwatch.GraphWidget(
                title="errors by function",
                left=[f.metric_errors(label=n) for n, f in functions.items()],
                width=12,
            )
        )
        widgets.append(
            cloudwatch.GraphWidget(
                title="relay API",
                left=[
                    relay_api.metric_server_error(),
                    relay_api.metric_client_error(),
                    relay_api.metric_count(),
                ],
                right=[relay_api.metric_latency()],
                width=12,
            )
        )
        widgets.append(cloudwatch.AlarmStatusWidget(alarms=self.alarms, title="alarms", width=24))
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=Stack.of(self).stack_name, widgets=[[w] for w in widgets]
        )
