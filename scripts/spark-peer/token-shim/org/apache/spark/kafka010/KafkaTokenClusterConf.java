// Type-only stand-in (see KafkaConfigUpdater.java): never instantiated without token clusters.
package org.apache.spark.kafka010;

public final class KafkaTokenClusterConf {
    private KafkaTokenClusterConf() {}
}
