// The kvctl native addon: build/Release/kvctl.node.
#include "register.h"

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  RegisterHash(env, exports);
  RegisterCuda(env, exports);
  RegisterCopy(env, exports);
  RegisterEvents(env, exports);
  RegisterDynamoEvents(env, exports);
  RegisterIndex(env, exports);
  return exports;
}

NODE_API_MODULE(kvctl, Init)
