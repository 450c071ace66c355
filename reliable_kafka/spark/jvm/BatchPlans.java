package reliablekafka.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.MonotonicallyIncreasingID;
import org.apache.spark.sql.catalyst.expressions.Nondeterministic;
import org.apache.spark.sql.catalyst.plans.logical.CollectMetrics;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.types.DataTypes;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * A micro-batch's output plan built once per streaming query and rebound to each later batch
 * (reliable_kafka.spark.batch_plans): Spark hands {@code foreachBatch} a new Dataset per batch, a
 * {@link LogicalRDD} over the batch's offsets with the same output attributes every batch, and
 * each DataFrame step built over it is parsed and analysed anew. Here the analysed plan of one
 * batch's sink rows (the spout's input projection, the user's transform, the header projections)
 * is copied with its leaf replaced by the new batch's and the per-batch salt literal by the new
 * salt; the copy is marked analysed, so Spark's analyser returns it as it is.
 */
public final class BatchPlans {
    private BatchPlans() {}

    /**
     * Why {@code plan} cannot be rebound per batch over {@code leaf}, or null when it can: every
     * leaf is a {@link LogicalRDD} with {@code leaf}'s output (the batch itself: no other table,
     * whose data or files could change between batches), no subquery, no observation (a name
     * used once), and no nondeterministic expression but {@code monotonically_increasing_id}
     * (a rand() would repeat its seed every batch).
     */
    public static String whyNot(LogicalPlan plan, LogicalPlan leaf) {
        if (!(leaf instanceof LogicalRDD)) {
            return "the batch is not a LogicalRDD: " + leaf.nodeName();
        }
        return check(plan, leaf);
    }

    private static String check(LogicalPlan node, LogicalPlan leaf) {
        List<LogicalPlan> children = CollectionConverters.asJava(node.children());
        if (children.isEmpty()) {
            if (!(node instanceof LogicalRDD) || !node.output().equals(leaf.output())) {
                return "it reads more than the batch: " + node.nodeName();
            }
            return null;
        }
        if (node instanceof CollectMetrics) {
            return "it observes metrics of its own";
        }
        if (!node.subqueries().isEmpty()) {
            return "it has a subquery";
        }
        for (Expression expression : CollectionConverters.asJava(node.expressions())) {
            String why = checkExpression(expression);
            if (why != null) {
                return why;
            }
        }
        for (LogicalPlan child : children) {
            String why = check(child, leaf);
            if (why != null) {
                return why;
            }
        }
        return null;
    }

    private static String checkExpression(Expression expression) {
        if (expression instanceof Nondeterministic && !(expression instanceof MonotonicallyIncreasingID)) {
            return "it has a nondeterministic expression: " + expression.prettyName();
        }
        for (Expression child : CollectionConverters.asJava(expression.children())) {
            String why = checkExpression(child);
            if (why != null) {
                return why;
            }
        }
        return null;
    }

    /**
     * {@code template} (analysed, {@link #whyNot} null) over {@code leaf} instead of its own
     * batch, every binary literal equal to {@code oldSalt} replaced by {@code newSalt}, as a
     * DataFrame of {@code spark}; an {@link IllegalStateException} when the template does not hold
     * {@code expectedSalts} such literals (the template is then not what it was built as).
     */
    public static Dataset<Row> rebind(
            SparkSession spark,
            LogicalPlan template,
            LogicalPlan leaf,
            byte[] oldSalt,
            byte[] newSalt,
            int expectedSalts) {
        SaltSwap swap = new SaltSwap(oldSalt, newSalt);
        LogicalPlan plan = rebound(template, (LogicalRDD) leaf, swap);
        if (swap.swapped != expectedSalts) {
            throw new IllegalStateException(
                    "rebinding a batch's plan: " + swap.swapped + " salt literals, expected " + expectedSalts);
        }
        plan.setAnalyzed();
        return org.apache.spark.sql.classic.Dataset.ofRows((org.apache.spark.sql.classic.SparkSession) spark, plan);
    }

    /** Binary literals equal to {@code salt} in {@code plan} (for the template's own check). */
    public static int salts(LogicalPlan plan, byte[] salt) {
        SaltSwap count = new SaltSwap(salt, salt);
        rebound(plan, null, count);
        return count.swapped;
    }

    private static LogicalPlan rebound(LogicalPlan node, LogicalRDD leaf, SaltSwap swap) {
        List<LogicalPlan> children = CollectionConverters.asJava(node.children());
        if (children.isEmpty()) {
            if (leaf == null) {
                return node;
            }
            if (!(node instanceof LogicalRDD) || !node.output().equals(leaf.output())) {
                throw new IllegalStateException("rebinding a batch's plan: a leaf that is not the batch's");
            }
            return leaf;
        }
        List<LogicalPlan> copies = new ArrayList<>(children.size());
        for (LogicalPlan child : children) {
            copies.add(rebound(child, leaf, swap));
        }
        LogicalPlan copy = node.withNewChildren(CollectionConverters.asScala(copies).toSeq());
        return (LogicalPlan) copy.transformExpressions(swap);
    }

    /** Replaces the binary literal {@code from} by {@code to}, counting what it replaced. */
    static final class SaltSwap extends AbstractPartialFunction<Expression, Expression> {
        private final byte[] from;
        private final Literal to;
        int swapped;

        SaltSwap(byte[] from, byte[] to) {
            this.from = from.clone();
            this.to = Literal.create(to.clone(), DataTypes.BinaryType);
        }

        @Override
        public boolean isDefinedAt(Expression expression) {
            return expression instanceof Literal literal
                    && literal.value() instanceof byte[] bytes
                    && Arrays.equals(bytes, from);
        }

        @Override
        public Expression apply(Expression expression) {
            swapped++;
            return to;
        }
    }
}
