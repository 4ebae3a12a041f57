// The dataset's columns for a DataFrame's schema, and how each value goes on the row stream
// (docs/engines.md, "The row stream"). The types are those stoker.spark's Python writer infers
// (python/stoker/sources.py, column_types): integers and booleans int, floats float:nan,
// strings str, binary bytes, arrays of floats ndarray, arrays of integers tokens, structs, maps
// and other arrays json (JsonText); every inferred type optional ("?"), as Spark's columns may
// hold nulls. The option columns=NAME=TYPE,... sets
// a type by name (image=jpeg), its "?" as given.
package stoker.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

final class RowColumns implements Serializable {
  private static final long serialVersionUID = 1L;

  enum Wire { INT, FLOAT, TEXT, BINARY, ARRAY, JSON }

  static final class Column implements Serializable {
    private static final long serialVersionUID = 1L;
    final String name;
    final String type;     // the stoker type text, "jpeg", "str?", "ndarray:float32?"
    final Wire wire;
    final DataType spark;  // the DataFrame column's type
    final ArrayElements elements;  // ARRAY: how its elements are stored
    final JsonText json;           // JSON: how a value becomes its text

    Column(String name, String type, Wire wire, DataType spark, ArrayElements elements) {
      this.name = name;
      this.type = type;
      this.wire = wire;
      this.spark = spark;
      this.elements = elements;
      this.json = wire == Wire.JSON ? new JsonText(name, spark) : null;
    }
  }

  final List<Column> columns = new ArrayList<>();

  RowColumns(StructType schema, String overridesText) {
    Map<String, String> overrides = parseOverrides(overridesText);
    HashSet<String> names = new HashSet<>();
    for (StructField f : schema.fields()) {
      names.add(f.name());
      String type = overrides.containsKey(f.name()) ? overrides.get(f.name()) : inferred(f) + "?";
      columns.add(column(f.name(), type, f.dataType()));
    }
    for (String name : overrides.keySet()) {
      if (!names.contains(name)) {
        throw new IllegalArgumentException(
            "columns: '" + name + "' is not a column of the input (" + String.join(", ", names)
                + ")");
      }
    }
  }

  static Map<String, String> parseOverrides(String text) {
    Map<String, String> out = new TreeMap<>();
    if (text == null) return out;
    for (String item : text.split(",")) {
      item = item.trim();
      if (item.isEmpty()) continue;
      int eq = item.indexOf('=');
      if (eq <= 0 || eq == item.length() - 1) {
        throw new IllegalArgumentException(
            "option columns: '" + item + "': give NAME=TYPE, e.g. image=jpeg");
      }
      out.put(item.substring(0, eq).trim(), item.substring(eq + 1).trim());
    }
    return out;
  }

  private static String inferred(StructField f) {
    DataType t = f.dataType();
    if (ArrayElements.isIntegral(t) || t instanceof BooleanType) return "int";
    if (t instanceof FloatType || t instanceof DoubleType) return "float:nan";
    if (t instanceof StringType) return "str";
    if (t instanceof BinaryType) return "bytes";
    if (t instanceof ArrayType) {
      DataType e = ((ArrayType) t).elementType();
      if (e instanceof FloatType) return "ndarray:float32";
      if (e instanceof DoubleType) return "ndarray:float64";
      if (ArrayElements.isIntegral(e)) return "tokens:" + integralName(e);
      return "json";  // strings, booleans, nested arrays, structs: a JSON array
    }
    if (t instanceof StructType || t instanceof MapType) return "json";
    throw new IllegalArgumentException(
        "column '" + f.name() + "': format(\"stoker-jvm\") does not write " + t.simpleString()
            + " (cast it, or write with format(\"stoker\"), which stores it as text)");
  }

  private static String integralName(DataType t) {
    if (t instanceof ByteType) return "int8";
    if (t instanceof ShortType) return "int16";
    if (t instanceof IntegerType) return "int32";
    return "int64";
  }

  // The stored type's wire form, if the Spark type can give it.
  private static Column column(String name, String type, DataType spark) {
    String bare = type.endsWith("?") ? type.substring(0, type.length() - 1) : type;
    String[] parts = bare.split(":");
    String base = parts[0];
    boolean numbers = ArrayElements.isIntegral(spark) || spark instanceof FloatType
        || spark instanceof DoubleType;
    boolean text = spark instanceof StringType || spark instanceof BinaryType;
    switch (base) {
      case "int":
        if (ArrayElements.isIntegral(spark) || spark instanceof BooleanType) {
          return new Column(name, type, Wire.INT, spark, null);
        }
        break;
      case "float":
        if (numbers) return new Column(name, type, Wire.FLOAT, spark, null);
        break;
      case "str":
        if (text) return new Column(name, type, Wire.TEXT, spark, null);
        break;
      case "json": {
        // Any value json.dumps can write, as the Python writer writes it: a string too is a
        // JSON string ("\"...\""), not the document it may hold.
        String refused = JsonText.refusal(spark);
        if (refused != null) {
          throw new IllegalArgumentException("column '" + name + "' (" + type + "): " + refused);
        }
        return new Column(name, type, Wire.JSON, spark, null);
      }
      case "bytes":
      case "jpeg":
      case "png":
        if (text) return new Column(name, type, Wire.BINARY, spark, null);
        break;
      case "ndarray":
      case "tokens":
        if (spark instanceof ArrayType) {
          String element = parts.length > 1 ? parts[1] : base.equals("tokens") ? "int32" : null;
          if (element == null) {
            throw new IllegalArgumentException("column '" + name + "': give the element type of "
                + "an ndarray column, e.g. ndarray:float32");
          }
          long[] shape = base.equals("ndarray") && parts.length > 2 ? shape(name, parts[2]) : null;
          String refused = ArrayElements.refusal(spark, element, shape);
          if (refused != null) {
            throw new IllegalArgumentException("column '" + name + "' (" + type + "): " + refused);
          }
          return new Column(name, type, Wire.ARRAY, spark,
              new ArrayElements(name, spark, element, shape));
        }
        break;
      default:
        break;
    }
    throw new IllegalArgumentException("column '" + name + "': a " + spark.simpleString()
        + " column cannot be stored as " + type);
  }

  // "3x4" -> {3, 4}; `stoker pack` checks the rest of the type.
  private static long[] shape(String name, String text) {
    String[] dims = text.split("x");
    long[] out = new long[dims.length];
    for (int k = 0; k < dims.length; k++) {
      try {
        out[k] = Long.parseLong(dims[k]);
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException(
            "column '" + name + "': bad shape '" + text + "' (give it as 3x4)", e);
      }
    }
    return out;
  }

  // The --columns flags, in the stream's order.
  List<String> packFlags() {
    List<String> out = new ArrayList<>();
    for (Column c : columns) {
      out.add("--columns");
      out.add(c.name + "=" + c.type);
    }
    return out;
  }

  // One row's values, in the columns' order.
  void write(InternalRow row, RowStreamOutput out) throws IOException {
    for (int i = 0; i < columns.size(); i++) {
      Column c = columns.get(i);
      if (row.isNullAt(i)) {
        out.noValue();
        continue;
      }
      DataType t = c.spark;
      switch (c.wire) {
        case INT:
          out.int64(t instanceof BooleanType ? (row.getBoolean(i) ? 1 : 0)
              : ArrayElements.integral(row, i, t));
          break;
        case FLOAT:
          out.float64(t instanceof FloatType ? row.getFloat(i)
              : t instanceof DoubleType ? row.getDouble(i)
              : (double) ArrayElements.integral(row, i, t));
          break;
        case TEXT:
        case BINARY:
          out.bytes(t instanceof StringType ? row.getUTF8String(i).getBytes() : row.getBinary(i));
          break;
        case ARRAY:
          out.array(row.getArray(i), c.elements);
          break;
        case JSON:
          out.bytes(c.json.text(row, i));
          break;
        default:
          throw new IllegalStateException();
      }
    }
  }
}
