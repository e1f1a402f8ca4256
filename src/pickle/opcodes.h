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

/// The opcode's name as pickletools spells it ("STACK_GLOBAL"), or nullptr.
constexpr const char* name(uint8_t code) {
  switch (code) {
    case kMark: return "MARK";
    case kStop: return "STOP";
    case kPop: return "POP";
    case kPopMark: return "POP_MARK";
    case kDup: return "DUP";
    case kFloat: return "FLOAT";
    case kInt: return "INT";
    case kBinInt: return "BININT";
    case kBinInt1: return "BININT1";
    case kLong: return "LONG";
    case kBinInt2: return "BININT2";
    case kNone: return "NONE";
    case kPersId: return "PERSID";
    case kBinPersId: return "BINPERSID";
    case kReduce: return "REDUCE";
    case kString: return "STRING";
    case kBinString: return "BINSTRING";
    case kShortBinString: return "SHORT_BINSTRING";
    case kUnicode: return "UNICODE";
    case kBinUnicode: return "BINUNICODE";
    case kAppend: return "APPEND";
    case kBuild: return "BUILD";
    case kGlobal: return "GLOBAL";
    case kDict: return "DICT";
    case kEmptyDict: return "EMPTY_DICT";
    case kAppends: return "APPENDS";
    case kGet: return "GET";
    case kBinGet: return "BINGET";
    case kInst: return "INST";
    case kLongBinGet: return "LONG_BINGET";
    case kList: return "LIST";
    case kEmptyList: return "EMPTY_LIST";
    case kObj: return "OBJ";
    case kPut: return "PUT";
    case kBinPut: return "BINPUT";
    case kLongBinPut: return "LONG_BINPUT";
    case kSetItem: return "SETITEM";
    case kTuple: return "TUPLE";
    case kEmptyTuple: return "EMPTY_TUPLE";
    case kSetItems: return "SETITEMS";
    case kBinFloat: return "BINFLOAT";
    case kProto: return "PROTO";
    case kNewObj: return "NEWOBJ";
    case kExt1: return "EXT1";
    case kExt2: return "EXT2";
    case kExt4: return "EXT4";
    case kTuple1: return "TUPLE1";
    case kTuple2: return "TUPLE2";
    case kTuple3: return "TUPLE3";
    case kNewTrue: return "NEWTRUE";
    case kNewFalse: return "NEWFALSE";
    case kLong1: return "LONG1";
    case kLong4: return "LONG4";
    case kBinBytes: return "BINBYTES";
    case kShortBinBytes: return "SHORT_BINBYTES";
    case kShortBinUnicode: return "SHORT_BINUNICODE";
    case kBinUnicode8: return "BINUNICODE8";
    case kBinBytes8: return "BINBYTES8";
    case kEmptySet: return "EMPTY_SET";
    case kAddItems: return "ADDITEMS";
    case kFrozenSet: return "FROZENSET";
    case kNewObjEx: return "NEWOBJ_EX";
    case kStackGlobal: return "STACK_GLOBAL";
    case kMemoize: return "MEMOIZE";
    case kFrame: return "FRAME";
    case kByteArray8: return "BYTEARRAY8";
    case kNextBuffer: return "NEXT_BUFFER";
    case kReadOnlyBuffer: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

/// The opcodes torch's weights_only unpickler reads (torch 2.6 to 2.14,
/// torch/_weights_only_unpickler.py): a protocol-2 subset. Any other opcode
/// fails with "Unsupported operand". torch 1.13 also lacks BINFLOAT.
constexpr bool in_torch_weights_only_subset(uint8_t code) {
  switch (code) {
    case kProto: case kStop: case kGlobal: case kNewObj: case kReduce: case kBuild: case kAppend:
    case kAppends: case kSetItem: case kSetItems: case kMark: case kTuple: case kTuple1: case kTuple2:
    case kTuple3: case kNone: case kNewFalse: case kNewTrue: case kEmptyTuple: case kEmptyList:
    case kEmptyDict: case kEmptySet: case kBinInt: case kBinInt1: case kBinInt2: case kBinFloat:
    case kBinUnicode: case kShortBinString: case kBinPersId: case kBinGet: case kLongBinGet: case kBinPut:
    case kLongBinPut: case kLong1:
      return true;
    default:
      return false;
  }
}

}  // namespace ckptfix::op
