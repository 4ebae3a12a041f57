// A json column's value as JSON text, as stoker.spark's Python writer makes it: json.dumps of
// what pyarrow gives for the value (python/stoker/sources.py, _json_value): structs and maps as
// objects (a map's keys as JSON writes scalar keys: text), arrays as arrays, strings, numbers,
// booleans and nulls as themselves. What json.dumps cannot write (binary, decimals, dates and
// timestamps inside such a value) is refused on the driver, naming the column; NaN and the
// infinities, which have no JSON form, are refused where they occur.
package stoker.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

final class JsonText implements Serializable {
  private static final long serialVersionUID = 1L;

  private final String column;
  private final DataType type;

  JsonText(String column, DataType type) {
    this.column = column;
    this.type = type;
  }

  // Why values of `t` have no JSON text (a leaf json.dumps cannot write), or null.
  static String refusal(DataType t) {
    if (t instanceof StructType) {
      for (StructField f : ((StructType) t).fields()) {
        String why = refusal(f.dataType());
        if (why != null) return why;
      }
      return null;
    }
    if (t instanceof MapType) {
      MapType m = (MapType) t;
      if (!isScalar(m.keyType())) {
        return "a map whose keys are " + m.keyType().simpleString() + " (JSON keys are text)";
      }
      return refusal(m.valueType());
    }
    if (t instanceof ArrayType) return refusal(((ArrayType) t).elementType());
    if (isScalar(t)) return null;
    return t.simpleString() + " values have no JSON form (cast them, e.g. to string)";
  }

  private static boolean isScalar(DataType t) {
    return t instanceof StringType || t instanceof BooleanType || t instanceof FloatType
        || t instanceof DoubleType || ArrayElements.isIntegral(t);
  }

  // The value at `ordinal` of `row` (not null) as UTF-8 JSON text.
  byte[] text(InternalRow row, int ordinal) {
    StringBuilder out = new StringBuilder();
    append(out, type, row, ordinal);
    return out.toString().getBytes(StandardCharsets.UTF_8);
  }

  private void append(StringBuilder out, DataType t, SpecializedGetters in, int i) {
    if (in.isNullAt(i)) {
      out.append("null");
    } else if (t instanceof StructType) {
      StructField[] fields = ((StructType) t).fields();
      InternalRow row = in.getStruct(i, fields.length);
      out.append('{');
      for (int k = 0; k < fields.length; k++) {
        if (k > 0) out.append(", ");
        quote(out, fields[k].name());
        out.append(": ");
        append(out, fields[k].dataType(), row, k);
      }
      out.append('}');
    } else if (t instanceof MapType) {
      MapType m = (MapType) t;
      MapData map = in.getMap(i);
      ArrayData keys = map.keyArray();
      ArrayData values = map.valueArray();
      out.append('{');
      for (int k = 0; k < map.numElements(); k++) {
        if (k > 0) out.append(", ");
        StringBuilder key = new StringBuilder();
        append(key, m.keyType(), keys, k);
        // json.dumps writes a key that is not text as its JSON text, quoted: 1 -> "1".
        if (m.keyType() instanceof StringType) {
          out.append(key);
        } else {
          quote(out, key.toString());
        }
        out.append(": ");
        append(out, m.valueType(), values, k);
      }
      out.append('}');
    } else if (t instanceof ArrayType) {
      DataType element = ((ArrayType) t).elementType();
      ArrayData a = in.getArray(i);
      out.append('[');
      for (int k = 0; k < a.numElements(); k++) {
        if (k > 0) out.append(", ");
        append(out, element, a, k);
      }
      out.append(']');
    } else if (t instanceof StringType) {
      quote(out, in.getUTF8String(i).toString());
    } else if (t instanceof BooleanType) {
      out.append(in.getBoolean(i) ? "true" : "false");
    } else if (t instanceof FloatType || t instanceof DoubleType) {
      double v = t instanceof FloatType ? in.getFloat(i) : in.getDouble(i);
      if (!Double.isFinite(v)) {
        throw new IllegalArgumentException("column '" + column + "': " + v
            + " has no JSON form (json columns hold no NaN or infinity)");
      }
      out.append(v);  // Java's 1.0E20 is JSON too, and reads back as the same double
    } else {
      out.append(ArrayElements.integral(in, i, t));
    }
  }

  private static void quote(StringBuilder out, String s) {
    out.append('"');
    for (int k = 0; k < s.length(); k++) {
      char c = s.charAt(k);
      switch (c) {
        case '"':
          out.append("\\\"");
          break;
        case '\\':
          out.append("\\\\");
          break;
        case '\n':
          out.append("\\n");
          break;
        case '\r':
          out.append("\\r");
          break;
        case '\t':
          out.append("\\t");
          break;
        default:
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
      }
    }
    out.append('"');
  }
}
