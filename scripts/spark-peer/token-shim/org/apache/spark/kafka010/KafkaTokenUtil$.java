// Stand-in for the Scala object KafkaTokenUtil (see KafkaConfigUpdater.java): no delegation
// tokens are configured, so no cluster matches and no token ever needs an update.
package org.apache.spark.kafka010;

public final class KafkaTokenUtil$ {
    public static final KafkaTokenUtil$ MODULE$ = new KafkaTokenUtil$();

    public scala.Option<KafkaTokenClusterConf> findMatchingTokenClusterConfig(
            org.apache.spark.SparkConf conf, String bootstrapServers) {
        return scala.Option.empty();
    }

    public boolean needTokenUpdate(java.util.Map<String, Object> params, scala.Option<?> conf) {
        return false;
    }
}
