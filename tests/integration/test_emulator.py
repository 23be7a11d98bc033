"""The local SQS/S3 emulator: queues with a redrive policy, a bucket, real API calls."""

from __future__ import annotations

import json

from jobrelay.aws.clients import AwsEndpoint, ensure_resources, s3_client, sqs_client
from tests.harness import AwsTestResources


async def test_queue_redrives_to_the_dead_letter_queue(
    aws: AwsEndpoint, aws_resources: AwsTestResources
) -> None:
    async with sqs_client(aws) as sqs:
        attributes = (
            await sqs.get_queue_attributes(
                QueueUrl=aws_resources.queues.work, AttributeNames=["RedrivePolicy"]
            )
        )["Attributes"]
        dlq_arn = (
            await sqs.get_queue_attributes(
                QueueUrl=aws_resources.queues.dead_letter, AttributeNames=["QueueArn"]
            )
        )["Attributes"]["QueueArn"]
        await sqs.send_message(QueueUrl=aws_resources.queues.work, MessageBody='{"x": 1}')
        received = await sqs.receive_message(QueueUrl=aws_resources.queues.work, WaitTimeSeconds=1)
    policy = json.loads(attributes["RedrivePolicy"])
    assert policy["deadLetterTargetArn"] == dlq_arn
    assert int(policy["maxReceiveCount"]) == 3
    assert [m["Body"] for m in received["Messages"]] == ['{"x": 1}']


async def test_bucket_stores_objects(aws: AwsEndpoint, aws_resources: AwsTestResources) -> None:
    async with s3_client(aws) as s3:
        await s3.put_object(Bucket=aws_resources.bucket, Key="a/b.json", Body=b"{}")
        body = await (await s3.get_object(Bucket=aws_resources.bucket, Key="a/b.json"))[
            "Body"
        ].read()
    assert body == b"{}"


async def test_resource_creation_is_idempotent(
    aws: AwsEndpoint, aws_resources: AwsTestResources
) -> None:
    work_name = aws_resources.queues.work.rsplit("/", 1)[-1]
    dlq_name = aws_resources.queues.dead_letter.rsplit("/", 1)[-1]
    again = await ensure_resources(
        aws,
        queue_name=work_name,
        dlq_name=dlq_name,
        bucket=aws_resources.bucket,
        max_receive_count=3,
    )
    assert again == aws_resources.queues
