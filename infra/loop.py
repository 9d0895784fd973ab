"""Loop: EventBridge Scheduler runs the scheduler and the reaper; the heartbeat FIFO queue
(from `steward.queues.HEARTBEAT`) feeds the heartbeat Lambda with partial batch
responses, a DLQ behind it."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from steward.queues import HEARTBEAT

TICK_MINUTES = 1
TICK_SECONDS = 60 * TICK_MINUTES
REAP_MINUTES = 5
MAX_RECEIVES = 5


class HeartbeatQueue(Construct):
    def __init__(self, scope: Construct, id: str, *, prefix: str, heartbeat_timeout: Duration) -> None:
        super().__init__(scope, id)
        # At least 6x the function's timeout (Lambda's advice for SQS sources), and never
        # shorter than the spec's.
        visibility = max(HEARTBEAT.visibility_timeout, 6 * int(heartbeat_timeout.to_seconds()))
        self.dlq = sqs.Queue(
            self,
            "Dlq",
            queue_name=f"{prefix}{HEARTBEAT.logical_name}-dlq.fifo",
            fifo=True,
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=HEARTBEAT.physical_name(prefix),
            fifo=HEARTBEAT.fifo,
            content_based_deduplication=HEARTBEAT.content_based_deduplication,
            visibility_timeout=Duration.seconds(visibility),
            retention_period=Duration.seconds(HEARTBEAT.message_retention),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=MAX_RECEIVES),
        )


class Loop(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        queue: HeartbeatQueue,
        scheduler_function: lambda_.IFunction,
        heartbeat_function: lambda_.IFunction,
        reaper_function: lambda_.IFunction,
    ) -> None:
        super().__init__(scope, id)
        heartbeat_function.add_event_source(
            sources.SqsEventSource(queue.queue, batch_size=10, report_batch_item_failures=True)
        )
        tick_role = iam.Role(self, "TickRole", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"))
        reap_role = iam.Role(self, "ReapRole", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"))
        self.tick = scheduler.Schedule(
            self,
            "Tick",
            schedule=scheduler.ScheduleExpression.rate(Duration.minutes(TICK_MINUTES)),
            target=targets.LambdaInvoke(scheduler_function, retry_attempts=0, role=tick_role),
            description="Steward scheduler: one heartbeat per live user per tick",
        )
        self.reap = scheduler.Schedule(
            self,
            "Reap",
            schedule=scheduler.ScheduleExpression.rate(Duration.minutes(REAP_MINUTES)),
            target=targets.LambdaInvoke(reaper_function, retry_attempts=0, role=reap_role),
            description="Steward reaper: overdue tasks, expired reservations",
        )
