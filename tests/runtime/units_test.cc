// Sizes and counts as users write them: parse_size, parse_count, format_size/rate/count.
#include "runtime/units.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

constexpr uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;

uint64_t size_of(std::string_view text) {
  StatusOr<uint64_t> s = parse_size(text);
  EXPECT_TRUE(s.is_ok()) << text << ": " << s.status().to_string();
  return s.is_ok() ? *s : ~uint64_t{0};
}

TEST(ParseSize, BinaryUnits) {
  EXPECT_EQ(size_of("512MiB"), 512 * MiB);
  EXPECT_EQ(size_of("1.5TiB"), TiB + TiB / 2);
  EXPECT_EQ(size_of("4k"), 4 * KiB);
  EXPECT_EQ(size_of("4K"), 4 * KiB);
  EXPECT_EQ(size_of("4KiB"), 4 * KiB);
  EXPECT_EQ(size_of("2G"), 2 * GiB);
  EXPECT_EQ(size_of("3t"), 3 * TiB);
  EXPECT_EQ(size_of("0.5m"), 512 * KiB);
  EXPECT_EQ(size_of(".5k"), 512u);
}

TEST(ParseSize, SiUnits) {
  EXPECT_EQ(size_of("24GB"), 24'000'000'000u);
  EXPECT_EQ(size_of("1KB"), 1000u);
  EXPECT_EQ(size_of("1kB"), 1000u);
  EXPECT_EQ(size_of("2MB"), 2'000'000u);
  EXPECT_EQ(size_of("1.5TB"), 1'500'000'000'000u);
}

TEST(ParseSize, PlainBytesAndSpaces) {
  EXPECT_EQ(size_of("0"), 0u);
  EXPECT_EQ(size_of("4096"), 4096u);
  EXPECT_EQ(size_of("17B"), 17u);
  EXPECT_EQ(size_of(" 8 MiB "), 8 * MiB);
  EXPECT_EQ(size_of("\t1GiB\n"), GiB);
  EXPECT_EQ(size_of("1.5B"), 2u);  // rounds to the nearest byte
}

TEST(ParseSize, RejectsNegativesAndGarbage) {
  for (std::string_view bad : {"-1", "-4k", "abc", "MiB", "1.2.3k"}) {
    StatusOr<uint64_t> s = parse_size(bad);
    ASSERT_FALSE(s.is_ok()) << bad;
    EXPECT_EQ(s.status().code(), Code::invalid_argument) << bad;
    EXPECT_NE(s.status().message().find(std::string(bad)), std::string::npos) << s.status().message();
  }
}

TEST(ParseSize, RejectsEmpty) {
  for (std::string_view bad : {"", "   "}) {
    StatusOr<uint64_t> s = parse_size(bad);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.status().code(), Code::invalid_argument);
    EXPECT_NE(s.status().message().find("empty"), std::string::npos) << s.status().message();
  }
}

TEST(ParseSize, UnknownUnitListsTheAcceptedOnes) {
  StatusOr<uint64_t> s = parse_size("12XB");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), Code::invalid_argument);
  const std::string& m = s.status().message();
  EXPECT_NE(m.find("'12XB'"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown unit 'XB'"), std::string::npos) << m;
  EXPECT_NE(m.find("MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("GB"), std::string::npos) << m;
  EXPECT_FALSE(parse_size("1e3").is_ok());  // no exponents: 'e3' is not a unit
  EXPECT_FALSE(parse_size("5 PiB").is_ok());
}

TEST(ParseSize, RejectsValuesAbove2To63) {
  EXPECT_EQ(size_of("8000000TB"), 8'000'000'000'000'000'000u);
  StatusOr<uint64_t> s = parse_size("10000000TB");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), Code::out_of_range);
  EXPECT_NE(s.status().message().find("too large"), std::string::npos) << s.status().message();
}

TEST(ParseCount, SiSuffixes) {
  EXPECT_EQ(*parse_count("17"), 17u);
  EXPECT_EQ(*parse_count("4K"), 4000u);
  EXPECT_EQ(*parse_count("100M"), 100'000'000u);
  EXPECT_EQ(*parse_count("1.5B"), 1'500'000'000u);
  EXPECT_EQ(*parse_count("1.5G"), 1'500'000'000u);
  EXPECT_EQ(*parse_count("2T"), 2'000'000'000'000u);
  EXPECT_EQ(*parse_count("0"), 0u);
}

TEST(ParseCount, Errors) {
  StatusOr<uint64_t> s = parse_count("12X");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), Code::invalid_argument);
  EXPECT_NE(s.status().message().find("unknown suffix 'X'"), std::string::npos) << s.status().message();
  EXPECT_EQ(parse_count("").status().code(), Code::invalid_argument);
  EXPECT_EQ(parse_count("-5").status().code(), Code::invalid_argument);
  EXPECT_EQ(parse_count("1MiB").status().code(), Code::invalid_argument);
}

TEST(FormatSize, PicksTheLargestBinaryUnit) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(17), "17 B");
  EXPECT_EQ(format_size(1023), "1023 B");
  EXPECT_EQ(format_size(KiB), "1 KiB");
  EXPECT_EQ(format_size(4 * KiB), "4 KiB");
  EXPECT_EQ(format_size(KiB + KiB / 2), "1.5 KiB");
  EXPECT_EQ(format_size(512 * MiB), "512 MiB");
  EXPECT_EQ(format_size(GiB + GiB / 2), "1.5 GiB");
  EXPECT_EQ(format_size(TiB + TiB / 4), "1.25 TiB");
  EXPECT_EQ(format_size(24'000'000'000u), "22.4 GiB");
}

TEST(FormatSize, NeverUsesExponents) {
  EXPECT_EQ(format_size(1000 * KiB), "1000 KiB");
  EXPECT_EQ(format_size(1000 * MiB), "1000 MiB");
  EXPECT_EQ(format_size(123456789), "118 MiB");
}

TEST(FormatSize, RoundTripsThroughParseSize) {
  for (uint64_t v : {uint64_t{0}, uint64_t{4096}, 512 * MiB, 3 * GiB, GiB + GiB / 2, 7 * TiB})
    EXPECT_EQ(size_of(format_size(v)), v) << format_size(v);
}

TEST(FormatRate, SiUnitsTwoDecimals) {
  EXPECT_EQ(format_rate(0), "0.00 B/s");
  EXPECT_EQ(format_rate(999), "999.00 B/s");
  EXPECT_EQ(format_rate(1.234e9), "1.23 GB/s");
  EXPECT_EQ(format_rate(6.5e12), "6.50 TB/s");
}

TEST(FormatCount, SiSuffixes) {
  EXPECT_EQ(format_count(17), "17");
  EXPECT_EQ(format_count(124.4e6), "124M");
  EXPECT_EQ(format_count(1.5e9), "1.5B");
  EXPECT_EQ(format_count(7e12), "7T");
  EXPECT_EQ(format_count(1000), "1K");
  EXPECT_EQ(format_count(999'999), "1000K");
}

}  // namespace
}  // namespace strata
