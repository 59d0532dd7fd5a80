package bdq;

import java.net.URI;
import java.util.List;
import java.util.Map;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.SdkBytes;
import software.amazon.awssdk.http.urlconnection.UrlConnectionHttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.sqs.SqsClient;
import software.amazon.awssdk.services.sqs.model.Message;
import software.amazon.awssdk.services.sqs.model.MessageAttributeValue;
import software.amazon.awssdk.services.sqs.model.ReceiveMessageResponse;
import software.amazon.awssdk.services.sqs.model.SendMessageResponse;

/**
 * Sends, receives, changes the visibility of and deletes a message through {@code bdq serve}
 * with the AWS SDK for Java v2, which checks MD5OfMessageBody and MD5OfMessageAttributes of
 * every send and receive (a mismatch fails the call).
 *
 * <p>Arguments: endpoint URL, access key id, secret access key, queue name. Exits 0 when every
 * step did what SQS would, 1 (with the reason on stderr) otherwise.
 */
public final class SqsRoundTrip {

  private SqsRoundTrip() {}

  public static void main(String[] args) {
    if (args.length != 4) {
      System.err.println("usage: SqsRoundTrip ENDPOINT ACCESS_KEY_ID SECRET QUEUE");
      System.exit(2);
    }
    try (SqsClient sqs =
        SqsClient.builder()
            .endpointOverride(URI.create(args[0]))
            .region(Region.US_EAST_1)
            .credentialsProvider(
                StaticCredentialsProvider.create(AwsBasicCredentials.create(args[1], args[2])))
            .httpClient(UrlConnectionHttpClient.create())
            .build()) {
      run(sqs, args[3]);
    } catch (RuntimeException e) {
      System.err.println("FAILED: " + e);
      System.exit(1);
    }
    System.out.println("OK");
  }

  private static void run(SqsClient sqs, String name) {
    String url = sqs.createQueue(b -> b.queueName(name)).queueUrl();
    String body = "order from Java: caf\u00e9 \u2713";
    Map<String, MessageAttributeValue> attributes =
        Map.of(
            "source", MessageAttributeValue.builder().dataType("String").stringValue("java").build(),
            "amount", MessageAttributeValue.builder().dataType("Number.eur").stringValue("12.50").build(),
            "blob",
                MessageAttributeValue.builder()
                    .dataType("Binary")
                    .binaryValue(SdkBytes.fromByteArray(new byte[] {0, 1, 2, (byte) 255}))
                    .build());

    SendMessageResponse sent =
        sqs.sendMessage(b -> b.queueUrl(url).messageBody(body).messageAttributes(attributes));

    ReceiveMessageResponse got =
        sqs.receiveMessage(
            b ->
                b.queueUrl(url)
                    .maxNumberOfMessages(10)
                    .waitTimeSeconds(5)
                    .visibilityTimeout(30)
                    .messageAttributeNames("All"));
    List<Message> messages = got.messages();
    check(messages.size() == 1, "received " + messages.size() + " messages, expected 1");
    Message message = messages.get(0);
    check(message.messageId().equals(sent.messageId()), "message id changed: " + message.messageId());
    check(message.body().equals(body), "body changed: " + message.body());
    check(message.messageAttributes().equals(attributes), "attributes changed: " + message.messageAttributes());

    sqs.changeMessageVisibility(
        b -> b.queueUrl(url).receiptHandle(message.receiptHandle()).visibilityTimeout(60));
    sqs.deleteMessage(b -> b.queueUrl(url).receiptHandle(message.receiptHandle()));

    // Deleted, not only hidden: even a receive that would take an expired lease finds nothing.
    List<Message> left =
        sqs.receiveMessage(b -> b.queueUrl(url).waitTimeSeconds(1)).messages();
    check(left.isEmpty(), "the deleted message came back: " + left);
  }

  private static void check(boolean ok, String why) {
    if (!ok) {
      throw new IllegalStateException(why);
    }
  }
}
