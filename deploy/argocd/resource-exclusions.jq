# argocd-cm in, argocd-cm out: appends the rules of $add (resource-exclusions.yaml, without its
# comments) to resource.exclusions, keeping every rule already there. A value that already
# excludes ProviderConfigUsage is left as it is, so running it twice changes nothing.
($add | split("\n") | map(select(startswith("#") | not)) | join("\n")) as $rules
| .data["resource.exclusions"] |= (
    (. // "") as $have
    | if ($have | test("(?m)^[ \\t]*-[ \\t]*[\"']?ProviderConfigUsage[\"']?[ \\t]*$")) then $have
      elif $have == "" or ($have | endswith("\n")) then $have + $rules
      else $have + "\n" + $rules
      end
  )
