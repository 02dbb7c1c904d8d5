// Stand-in for spark-token-provider-kafka-0-10's KafkaConfigUpdater, which the package registry
// this machine reaches does not serve. The benchmark peer talks plaintext to a local broker, so
// the delegation-token step is a no-op; set/setIfUnset/build behave as Spark's class does.
package org.apache.spark.kafka010;

import java.util.HashMap;
import java.util.Map;

public class KafkaConfigUpdater {
    private final Map<String, Object> params;

    public KafkaConfigUpdater(String module, scala.collection.immutable.Map<String, Object> kafkaParams) {
        this.params = new HashMap<>(scala.jdk.javaapi.CollectionConverters.asJava(kafkaParams));
    }

    public KafkaConfigUpdater set(String key, Object value) {
        params.put(key, value);
        return this;
    }

    public KafkaConfigUpdater setIfUnset(String key, Object value) {
        params.putIfAbsent(key, value);
        return this;
    }

    public KafkaConfigUpdater setAuthenticationConfigIfNeeded() {
        return this;
    }

    public KafkaConfigUpdater setAuthenticationConfigIfNeeded(scala.Option<?> clusterConfig) {
        return this;
    }

    public Map<String, Object> build() {
        return params;
    }
}
