package reliablekafka.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Observation;
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
 * batch's observed sink rows (the spout's input projection, the user's transform, the header
 * projections, the observation) is copied with its leaf replaced by the new batch's and the per-batch salt literal by the new
 * salt, its observation renamed to a new one; the copy is marked analysed, so Spark's analyser
 * returns it as it is.
 */
public final class BatchPlans {
    private BatchPlans() {}

    /**
     * Why {@code plan} cannot be rebound per batch over {@code leaf}, or null when it can: every
     * leaf is a {@link LogicalRDD} with {@code leaf}'s output (the batch itself: no other table,
     * whose data or files could change between batches), no subquery, no observation but
     * {@code observation} (a name is used once; that one is renamed), and no nondeterministic expression but {@code monotonically_increasing_id}
     * (a rand() would repeat its seed every batch).
     */
    public static String whyNot(LogicalPlan plan, LogicalPlan leaf, String observation) {
        if (!(leaf instanceof LogicalRDD)) {
            return "the batch is not a LogicalRDD: " + leaf.nodeName();
        }
        return check(plan, leaf, observation);
    }

    private static String check(LogicalPlan node, LogicalPlan leaf, String observation) {
        List<LogicalPlan> children = CollectionConverters.asJava(node.children());
        if (children.isEmpty()) {
            if (!(node instanceof LogicalRDD) || !node.output().equals(leaf.output())) {
                return "it reads more than the batch: " + node.nodeName();
            }
            return null;
        }
        if (node instanceof CollectMetrics metrics && !metrics.name().equals(observation)) {
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
            String why = check(child, leaf, observation);
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
     * batch, every binary literal equal to {@code oldSalt} replaced by {@code newSalt} and its
     * observation {@code oldName} by {@code observation} (registered with {@code spark}, as
     * {@code Dataset.observe} registers one), as a DataFrame of {@code spark}; an
     * {@link IllegalStateException} when the template does not hold {@code expectedSalts} such
     * literals and that one observation (the template is then not what it was built as), or its
     * leaf is not the batch's kind.
     */
    public static Dataset<Row> rebind(
            SparkSession spark,
            LogicalPlan template,
            LogicalPlan leaf,
            byte[] oldSalt,
            byte[] newSalt,
            int expectedSalts,
            String oldName,
            Observation observation) {
        Rebinding rebinding = new Rebinding((LogicalRDD) leaf, oldSalt, newSalt, oldName, observation.name());
        LogicalPlan plan = rebinding.rebound(template);
        if (rebinding.swap.swapped != expectedSalts || rebinding.observed.size() != 1) {
            throw new IllegalStateException("rebinding a batch's plan: " + rebinding.swap.swapped
                    + " salt literals (expected " + expectedSalts + "), " + rebinding.observed.size()
                    + " observations named " + oldName + " (expected 1)");
        }
        plan.setAnalyzed();
        org.apache.spark.sql.classic.SparkSession session = (org.apache.spark.sql.classic.SparkSession) spark;
        session.observationManager().register(observation, rebinding.observed.get(0));
        return org.apache.spark.sql.classic.Dataset.ofRows(session, plan);
    }

    /** Binary literals equal to {@code salt} in {@code plan} (for the template's own check). */
    public static int salts(LogicalPlan plan, byte[] salt) {
        Rebinding count = new Rebinding(null, salt, salt, null, null);
        count.rebound(plan);
        return count.swap.swapped;
    }

    /** One copy of a template: the new leaf, salt and observation name. */
    private static final class Rebinding {
        final LogicalRDD leaf;
        final SaltSwap swap;
        final String oldName;
        final String newName;
        final List<Long> observed = new ArrayList<>(); // the renamed observations' dataframe ids

        Rebinding(LogicalRDD leaf, byte[] oldSalt, byte[] newSalt, String oldName, String newName) {
            this.leaf = leaf;
            this.swap = new SaltSwap(oldSalt, newSalt);
            this.oldName = oldName;
            this.newName = newName;
        }

        LogicalPlan rebound(LogicalPlan node) {
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
                copies.add(rebound(child));
            }
            LogicalPlan copy;
            if (newName != null && node instanceof CollectMetrics metrics && metrics.name().equals(oldName)) {
                observed.add(metrics.dataframeId());
                copy = new CollectMetrics(newName, metrics.metrics(), copies.get(0), metrics.dataframeId());
            } else {
                copy = node.withNewChildren(CollectionConverters.asScala(copies).toSeq());
            }
            return (LogicalPlan) copy.transformExpressions(swap);
        }
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
