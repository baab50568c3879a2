// One register function per area; addon.cpp calls each. A new area adds its .cpp here (or
// under native/<area>/) and one line in addon.cpp.
#pragma once
#include <napi.h>

void RegisterHash(Napi::Env env, Napi::Object exports);
void RegisterCuda(Napi::Env env, Napi::Object exports);
void RegisterCopy(Napi::Env env, Napi::Object exports);
void RegisterEvents(Napi::Env env, Napi::Object exports);  // events.cpp (native/events)
void RegisterDynamoEvents(Napi::Env env, Napi::Object exports);  // dynamo_events.cpp (native/events/adapters)
void RegisterIndex(Napi::Env env, Napi::Object exports);   // index.cpp (native/index)
