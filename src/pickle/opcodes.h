// Pickle opcodes, protocols 0-5 (CPython Lib/pickle.py, pickletools).
#pragma once

#include <cstdint>

namespace ckptfix::op {

// Protocol 0 and 1
constexpr uint8_t kMark = '(';
constexpr uint8_t kStop = '.';
constexpr uint8_t kPop = '0';
constexpr uint8_t kPopMark = '1';
constexpr uint8_t kDup = '2';
constexpr uint8_t kFloat = 'F';
constexpr uint8_t kInt = 'I';
constexpr uint8_t kBinInt = 'J';
constexpr uint8_t kBinInt1 = 'K';
constexpr uint8_t kLong = 'L';
constexpr uint8_t kBinInt2 = 'M';
constexpr uint8_t kNone = 'N';
constexpr uint8_t kPersId = 'P';
constexpr uint8_t kBinPersId = 'Q';
constexpr uint8_t kReduce = 'R';
constexpr uint8_t kString = 'S';
constexpr uint8_t kBinString = 'T';
constexpr uint8_t kShortBinString = 'U';
constexpr uint8_t kUnicode = 'V';
constexpr uint8_t kBinUnicode = 'X';
constexpr uint8_t kAppend = 'a';
constexpr uint8_t kBuild = 'b';
constexpr uint8_t kGlobal = 'c';
constexpr uint8_t kDict = 'd';
constexpr uint8_t kEmptyDict = '}';
constexpr uint8_t kAppends = 'e';
constexpr uint8_t kGet = 'g';
constexpr uint8_t kBinGet = 'h';
constexpr uint8_t kInst = 'i';
constexpr uint8_t kLongBinGet = 'j';
constexpr uint8_t kList = 'l';
constexpr uint8_t kEmptyList = ']';
constexpr uint8_t kObj = 'o';
constexpr uint8_t kPut = 'p';
constexpr uint8_t kBinPut = 'q';
constexpr uint8_t kLongBinPut = 'r';
constexpr uint8_t kSetItem = 's';
constexpr uint8_t kTuple = 't';
constexpr uint8_t kEmptyTuple = ')';
constexpr uint8_t kSetItems = 'u';
constexpr uint8_t kBinFloat = 'G';
// Protocol 2
constexpr uint8_t kProto = 0x80;
constexpr uint8_t kNewObj = 0x81;
constexpr uint8_t kExt1 = 0x82;
constexpr uint8_t kExt2 = 0x83;
constexpr uint8_t kExt4 = 0x84;
constexpr uint8_t kTuple1 = 0x85;
constexpr uint8_t kTuple2 = 0x86;
constexpr uint8_t kTuple3 = 0x87;
constexpr uint8_t kNewTrue = 0x88;
constexpr uint8_t kNewFalse = 0x89;
constexpr uint8_t kLong1 = 0x8a;
constexpr uint8_t kLong4 = 0x8b;
// Protocol 3
constexpr uint8_t kBinBytes = 'B';
constexpr uint8_t kShortBinBytes = 'C';
// Protocol 4
constexpr uint8_t kShortBinUnicode = 0x8c;
constexpr uint8_t kBinUnicode8 = 0x8d;
constexpr uint8_t kBinBytes8 = 0x8e;
constexpr uint8_t kEmptySet = 0x8f;
constexpr uint8_t kAddItems = 0x90;
constexpr uint8_t kFrozenSet = 0x91;
constexpr uint8_t kNewObjEx = 0x92;
constexpr uint8_t kStackGlobal = 0x93;
constexpr uint8_t kMemoize = 0x94;
constexpr uint8_t kFrame = 0x95;
// Protocol 5
constexpr uint8_t kByteArray8 = 0x96;
constexpr uint8_t kNextBuffer = 0x97;
constexpr uint8_t kReadOnlyBuffer = 0x98;

}  // namespace ckptfix::op
