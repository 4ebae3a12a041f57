// format("stoker-jvm"): a stoker dataset written by Spark's executors themselves, no Python
// worker in between (docs/engines.md, "Spark"). Each task pipes its rows to a `stoker pack -`
// process (the row stream, docs/engines.md) that writes them as a part; the driver's commit
// publishes the accepted parts as one version with `stoker commit --only`. Write only: read
// with format("stoker") (stoker.spark.register).
package stoker.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

public final class StokerJvmSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "stoker-jvm";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    throw new UnsupportedOperationException(
        "format(\"stoker-jvm\") only writes: read with format(\"stoker\") (stoker.spark.register)");
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;  // the DataFrame's schema is the dataset's
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new WriteTable(schema);
  }

  private static final class WriteTable implements Table, SupportsWrite {
    private final StructType schema;

    WriteTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "stoker-jvm";
    }

    @Override
    @SuppressWarnings("deprecation")  // Spark 4 still reads a table's columns from it
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      // TRUNCATE only so that mode("overwrite") reaches truncate() below and hears why not.
      return EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.TRUNCATE);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return new SupportsTruncate() {
        @Override
        public WriteBuilder truncate() {
          throw new UnsupportedOperationException(
              "stoker never replaces a published version: use mode(\"append\") to write the "
                  + "next version, or save to a new path");
        }

        @Override
        public Write build() {
          return new Write() {
            @Override
            public BatchWrite toBatch() {
              return new StokerBatchWrite(info.schema(), info.options());
            }
          };
        }
      };
    }
  }
}
