// Makes NATS identities for the credential tests (tests/broker/worker_proctest.cpp) with the
// NATS team's own libraries, into <dir>:
//   operator.conf  an operator-mode nats-server configuration (memory resolver) with one
//                  account; user.creds, a credentials file of a user of that account
//   nkey.conf      a configuration with one NKey user; nkey.seed, that user's seed
//
//   node nats_identities.mjs <dir>
import * as jwt from "@nats-io/jwt";
import { writeFileSync } from "node:fs";

const dir = process.argv[2];
const text = (bytes) => new TextDecoder().decode(bytes);
const unlimited = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true,
                    conn: -1, leaf: -1 };

const operatorKey = jwt.createOperator();
const systemKey = jwt.createAccount();
const accountKey = jwt.createAccount();
const userKey = jwt.createUser();
const operator = await jwt.encodeOperator("wuhu-test", operatorKey,
                                          { system_account: systemKey.getPublicKey() });
const system = await jwt.encodeAccount("SYS", systemKey, { limits: unlimited },
                                       { signer: operatorKey });
const account = await jwt.encodeAccount("WUHU", accountKey, { limits: unlimited },
                                        { signer: operatorKey });
const user = await jwt.encodeUser("fleet", userKey, accountKey, {});
writeFileSync(`${dir}/user.creds`, text(jwt.fmtCreds(user, userKey)));
writeFileSync(`${dir}/operator.conf`, `operator: ${operator}
system_account: ${systemKey.getPublicKey()}
resolver: MEMORY
resolver_preload: {
  ${systemKey.getPublicKey()}: ${system}
  ${accountKey.getPublicKey()}: ${account}
}
`);

const nkeyUser = jwt.createUser();
writeFileSync(`${dir}/nkey.seed`, text(nkeyUser.getSeed()) + "\n");
writeFileSync(`${dir}/nkey.conf`,
              `authorization { users: [ { nkey: ${nkeyUser.getPublicKey()} } ] }\n`);
