package controllers

// The operator's rights on its token-key Secret (cmd/manager). get is limited to that one name; a
// create cannot be limited by name (the name is not known to the authorizer before the object
// exists), so it is limited to the operator's namespace instead. No list or watch: a Secret of
// that name is read once at start.
//
// +kubebuilder:rbac:groups="",namespace=lockedjob-system,resources=secrets,verbs=get,resourceNames=lockedjob-token-key
// +kubebuilder:rbac:groups="",namespace=lockedjob-system,resources=secrets,verbs=create
