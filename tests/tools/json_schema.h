// A small JSON Schema (draft-07 subset) checker for tests: type (incl. type arrays), required,
// properties, additionalProperties: false, items, minimum. Returns every violation with its path.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flotilla_test {

inline bool json_has_type(const nlohmann::json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

inline void validate_schema(const nlohmann::json& schema, const nlohmann::json& v, const std::string& path,
                            std::vector<std::string>& errors) {
  if (schema.contains("type")) {
    bool ok = false;
    if (schema["type"].is_array()) {
      for (const auto& t : schema["type"]) ok = ok || json_has_type(v, t.get<std::string>());
    } else {
      ok = json_has_type(v, schema["type"].get<std::string>());
    }
    if (!ok) {
      errors.push_back(path + ": expected type " + schema["type"].dump() + ", got " + v.dump());
      return;
    }
  }
  if (schema.contains("minimum") && v.is_number() && v.get<double>() < schema["minimum"].get<double>())
    errors.push_back(path + ": " + v.dump() + " below minimum " + schema["minimum"].dump());
  if (v.is_object()) {
    if (schema.contains("required"))
      for (const auto& r : schema["required"])
        if (!v.contains(r.get<std::string>())) errors.push_back(path + ": missing required key " + r.dump());
    const bool closed = schema.contains("additionalProperties") && schema["additionalProperties"] == false;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (schema.contains("properties") && schema["properties"].contains(it.key()))
        validate_schema(schema["properties"][it.key()], it.value(), path + "." + it.key(), errors);
      else if (closed)
        errors.push_back(path + ": key '" + it.key() + "' is not in the schema");
    }
  }
  if (v.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < v.size(); ++i)
      validate_schema(schema["items"], v[i], path + "[" + std::to_string(i) + "]", errors);
  }
}

}  // namespace flotilla_test
