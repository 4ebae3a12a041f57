// What every option table's test checks (common/option_table.h): names unique, documented and
// found by name; each entry writing its own field of the options struct and only it. One
// template for the transform, pack and loader tables, so a new table gets the same checks.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/option_table.h"

namespace stoker::test {

// A value of `option`'s kind that differs from `current` (a number for an unset one).
template <typename Options>
OptionValue AnotherOptionValue(const Option<Options>& option, const OptionValue& current) {
  if (std::holds_alternative<std::monostate>(current)) return uint64_t{3};
  switch (option.kind) {
    case OptionKind::kBool:
      return !std::get<bool>(current);
    case OptionKind::kUnsigned:
    case OptionKind::kByteSize:
      return std::get<uint64_t>(current) + 3;
    case OptionKind::kNumber:
      return std::get<double>(current) / 2 + 0.125;
    case OptionKind::kChoice:
      for (const std::string_view c : option.choices) {
        if (c != std::get<std::string>(current)) return std::string(c);
      }
      break;
    case OptionKind::kTexts: {
      std::vector<std::string> v = std::get<std::vector<std::string>>(current);
      v.emplace_back("another");
      return v;
    }
    case OptionKind::kPair:
    case OptionKind::kTriple:
    case OptionKind::kSize: {
      std::vector<double> v = std::get<std::vector<double>>(current);
      for (double& x : v) x += option.kind == OptionKind::kSize ? 16 : 0.25;
      return v;
    }
  }
  ADD_FAILURE() << option.name << ": no other value";
  return current;
}

// Names unique and documented, choices exactly for kChoice, and `find` finding each by name.
template <typename Options>
void ExpectNamesUniqueAndDocumented(
    std::span<const Option<Options>> table,
    const std::function<const Option<Options>*(std::string_view)>& find) {
  std::set<std::string_view> names;
  for (const Option<Options>& option : table) {
    EXPECT_TRUE(names.insert(option.name).second) << option.name;
    EXPECT_FALSE(option.doc.empty()) << option.name;
    EXPECT_EQ(option.kind == OptionKind::kChoice, !option.choices.empty()) << option.name;
    EXPECT_EQ(find(option.name), &option);
  }
  EXPECT_EQ(find("no_such_option"), nullptr);
}

// Writing an option's default changes nothing; writing another value reads back (`same` says
// when two values are equal: float32 fields round) and leaves every other option as it was.
template <typename Options>
void ExpectEachOptionWritesItsOwnFieldOnly(
    std::span<const Option<Options>> table,
    const std::function<void(const OptionValue&, const OptionValue&)>& expect_same =
        [](const OptionValue& a, const OptionValue& b) { EXPECT_EQ(a, b); }) {
  const Options defaults;
  for (const Option<Options>& option : table) {
    SCOPED_TRACE(std::string(option.name));
    Options o;
    ASSERT_TRUE(option.set(o, option.get(defaults)).ok());
    const OptionValue changed = AnotherOptionValue(option, option.get(defaults));
    ASSERT_TRUE(option.set(o, changed).ok());
    expect_same(option.get(o), changed);
    for (const Option<Options>& other : table) {
      if (&other != &option) {
        EXPECT_EQ(other.get(o), other.get(defaults)) << other.name << " changed too";
      }
    }
  }
}

}  // namespace stoker::test
