"""Runner: the VPC the runtimes run in, the ECS cluster, the Fargate task definition built
from containers/runner, a security group that lets out HTTPS only, a log group.

The task definition has no task role: the runtime holds no AWS credential and works only
through `/v1/runtime/*` with its capability (docs/concepts/runner.md). The execution role only
pulls the image and writes the log stream.
"""

from __future__ import annotations

from aws_cdk import IgnoreMode, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.functions import ROOT

CONTAINER = "runner"
# Dependency installs (pip, npm) and checks such as a test suite: 2 vCPU, 4 GiB, and 40 GiB
# of ephemeral storage for the clone and its packages.
CPU = 2048
MEMORY_MIB = 4096
EPHEMERAL_GIB = 40
# The build context of the runner's image: what containers/runner/Dockerfile copies.
IMAGE_FILES = (
    "pyproject.toml",
    "README.md",
    "requirements.lock",
    "containers/runner",
    "layers/steward/python",
)


class Runner(Construct):
    def __init__(
        self, scope: Construct, id: str, *, log_retention: logs.RetentionDays, network: str | None = None
    ) -> None:
        super().__init__(scope, id)
        if network not in (None, "private", "public"):
            raise ValueError(f"the context runnerNetwork is `private` or `public`, not {network!r}")
        # `private` (the default): private subnets behind one NAT gateway (about $35 a month
        # with nothing running). `public`: public subnets, a public IP per task, no NAT; the
        # same security group lets out HTTPS only and nothing in.
        self.assign_public_ip = network == "public"
        flow_logs = logs.LogGroup(
            self, "FlowLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        runners = ec2.SubnetType.PUBLIC if self.assign_public_ip else ec2.SubnetType.PRIVATE_WITH_EGRESS
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=0 if self.assign_public_ip else 1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                *(
                    []
                    if self.assign_public_ip
                    else [ec2.SubnetConfiguration(name="runners", subnet_type=runners, cidr_mask=20)]
                ),
            ],
            flow_logs={
                "all": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                    traffic_type=ec2.FlowLogTrafficType.REJECT,
                )
            },
            restrict_default_security_group=True,
        )
        self.subnets = self.vpc.select_subnets(subnet_type=runners)
        self.security_group = ec2.SecurityGroup(
            self,
            "TaskSecurityGroup",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="Steward runtimes: HTTPS out only (control plane, relay, GitHub, package indexes)",
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS")
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=self.vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            cpu=CPU,
            memory_limit_mib=MEMORY_MIB,
            ephemeral_storage_gib=EPHEMERAL_GIB,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        self.container = self.task_definition.add_container(
            CONTAINER,
            container_name=CONTAINER,
            image=ecs.ContainerImage.from_asset(
                str(ROOT),
                file="containers/runner/Dockerfile",
                # Fargate runs it on x86-64 (above): built for that on any machine (an arm64
                # laptop builds it with buildx and QEMU).
                platform=ecr_assets.Platform.LINUX_AMD64,
                # What the Dockerfile copies, and nothing else: the build context stays small
                # and unchanged by virtualenvs, caches or tests, so a deploy rebuilds it only
                # when the runner's own files change.
                ignore_mode=IgnoreMode.DOCKER,
                exclude=["*", *(f"!{path}" for path in IMAGE_FILES), "**/__pycache__"],
            ),
            logging=ecs.LogDriver.aws_logs(stream_prefix="runner", log_group=self.log_group),
        )
        self.execution_role = self.task_definition.obtain_execution_role()
        # No task role at all (CDK always makes one): the container gets no AWS credentials.
        cfn = self.task_definition.node.default_child
        assert isinstance(cfn, ecs.CfnTaskDefinition)
        cfn.add_property_deletion_override("TaskRoleArn")
        self.task_definition.node.try_remove_child("TaskRole")
