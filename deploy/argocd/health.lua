-- Argo CD health of a sandbox.cozystack.io/WorkspaceSandbox (a namespaced Crossplane XR).
--
-- Crossplane writes the Synced and Ready conditions; the function writes status.phase and the
-- Provisioned, Suspended and Snapshots conditions. In order:
--   Synced False                                  -> Degraded     (Crossplane can't reconcile)
--   phase Failed                                  -> Degraded     (Provisioned says why)
--   phase Suspended, or condition Suspended True  -> Suspended    (Suspended says why)
--   Ready True                                    -> Healthy
--   anything else                                 -> Progressing  ("<phase>: <why>")
-- Plain Lua 5.1 (Argo CD's gopher-lua); every field may be missing.

local hs = {}

local function str(value)
  if type(value) == "string" and value ~= "" then
    return value
  end
  return nil
end

local status = nil
if type(obj) == "table" and type(obj.status) == "table" then
  status = obj.status
end

local function condition(kind)
  if status == nil or type(status.conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if type(c) == "table" and c.type == kind then
      return c
    end
  end
  return nil
end

local function is(c, value)
  return c ~= nil and c.status == value
end

-- "<reason>: <message>", or whichever of the two exists, or the fallback.
local function explain(c, fallback)
  if c == nil then
    return fallback
  end
  local reason, message = str(c.reason), str(c.message)
  if reason ~= nil and message ~= nil then
    return reason .. ": " .. message
  end
  return message or reason or fallback
end

local function message_of(c)
  if c == nil then
    return nil
  end
  return str(c.message) or str(c.reason)
end

local phase = nil
if status ~= nil then
  phase = str(status.phase)
end
local synced = condition("Synced")
local ready = condition("Ready")
local provisioned = condition("Provisioned")
local suspended = condition("Suspended")

if is(synced, "False") then
  hs.status = "Degraded"
  hs.message = explain(synced, "the composite resource is not synced")
  return hs
end

if phase == "Failed" then
  hs.status = "Degraded"
  hs.message = explain(provisioned, "the sandbox failed")
  return hs
end

if phase == "Suspended" or is(suspended, "True") then
  hs.status = "Suspended"
  hs.message = explain(suspended, "the sandbox is suspended; the workspace disk is kept")
  return hs
end

if is(ready, "True") then
  hs.status = "Healthy"
  hs.message = phase or "Ready"
  if str(status.endpoint) ~= nil then
    hs.message = hs.message .. ": " .. status.endpoint
  end
  return hs
end

hs.status = "Progressing"
if phase == nil then
  hs.message = "waiting for the function to report status"
  return hs
end
-- What is awaited: while suspending, the Suspended condition says; while provisioning,
-- Provisioned does; once provisioned, Crossplane's Ready names the resources not ready yet.
local why = nil
if phase == "Suspending" then
  why = message_of(suspended)
elseif not is(provisioned, "True") then
  why = message_of(provisioned)
end
why = why or message_of(ready) or message_of(provisioned)
if why ~= nil then
  hs.message = phase .. ": " .. why
else
  hs.message = phase
end
return hs
