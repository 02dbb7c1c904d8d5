// Stand-in for the Scala object KafkaRedactionUtil (see KafkaConfigUpdater.java): used only
// for debug logging of consumer settings; the peer's settings hold no secrets.
package org.apache.spark.kafka010;

public final class KafkaRedactionUtil$ {
    public static final KafkaRedactionUtil$ MODULE$ = new KafkaRedactionUtil$();

    public <T> scala.collection.immutable.Seq<T> redactParams(scala.collection.immutable.Seq<T> params) {
        return params;
    }
}
