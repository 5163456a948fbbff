// eslint over the console's files (console/www; its vendored NATS client excepted), run by
// tests/console/run.sh: plain browser ES modules.
import js from '@eslint/js';
import globals from 'globals';

export default [
    {ignores: ['**/vendor/**', '**/node_modules/**']},
    js.configs.recommended,
    {
        files: ['**/*.js', '**/*.mjs'],
        languageOptions: {
            ecmaVersion: 2022,
            sourceType: 'module',
            globals: {...globals.browser, ...globals.node},
        },
        rules: {
            'no-unused-vars': ['error', {argsIgnorePattern: '^_'}],
            eqeqeq: ['error', 'smart'],
            'no-var': 'error',
            'prefer-const': 'error',
            'no-throw-literal': 'off',
        },
    },
];
