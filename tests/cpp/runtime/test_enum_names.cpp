// The enum name tables (runtime/enum_names.h): parse and name are inverses over every row, an
// unknown name parses to nothing (and the parsers' errors list every name), names are unique.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "shardtrain/data/chat_template.h"
#include "shardtrain/data/instruction.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/runtime/enum_names.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain {
namespace {

enum class Fruit { kApple, kPear, kFig };
constexpr runtime::EnumName<Fruit> kFruitNames[] = {
    {Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}, {Fruit::kFig, "fig"}};

TEST(EnumNames, ParseNameAndChoices) {
  EXPECT_EQ(runtime::parse_enum(kFruitNames, "pear"), Fruit::kPear);
  EXPECT_FALSE(runtime::parse_enum(kFruitNames, "plum").has_value());
  EXPECT_FALSE(runtime::parse_enum(kFruitNames, "Pear").has_value()) << "names are case-sensitive";
  EXPECT_FALSE(runtime::parse_enum(kFruitNames, "").has_value());
  EXPECT_STREQ(runtime::enum_name(kFruitNames, Fruit::kFig), "fig");
  EXPECT_STREQ(runtime::enum_name(kFruitNames, static_cast<Fruit>(7)), "");
  EXPECT_EQ(runtime::enum_choices(kFruitNames), "apple, pear or fig");
}

// Every row of a real table round-trips through its module's parse and name functions, names
// are distinct, and an unknown name is a UsageError naming the option and every accepted name.
template <typename E, size_t N, typename Parse, typename Name>
void expect_table(const runtime::EnumName<E> (&table)[N], Parse parse, Name name,
                  const std::string& option) {
  std::set<std::string> seen;
  for (const auto& row : table) {
    EXPECT_TRUE(seen.insert(row.name).second) << row.name << " twice";
    EXPECT_EQ(parse(row.name), row.value) << row.name;
    EXPECT_STREQ(name(row.value), row.name);
  }
  try {
    parse("no-such-name");
    ADD_FAILURE() << option << " accepted an unknown name";
  } catch (const runtime::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(option), std::string::npos) << what;
    for (const auto& row : table) EXPECT_NE(what.find(row.name), std::string::npos) << what;
  }
}

TEST(EnumNames, ModuleTablesRoundTrip) {
  expect_table(data::kDataFormatNames, data::parse_format, data::format_name, "--format");
  expect_table(data::kChatTemplateNames, data::parse_chat_template, data::chat_template_name,
               "--chat-template");
  expect_table(fsdp::kShardingNames, fsdp::parse_sharding, fsdp::sharding_name, "--sharding");
}

}  // namespace
}  // namespace shardtrain
